package kafka_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
)

// nested is an object nesting levels deep (the outer object counts),
// alternating objects and arrays, with a string in the middle.
func nested(levels int) string {
	var open, closing string
	for i := range levels {
		if i%2 == 0 {
			open, closing = open+`{"a":`, "}"+closing
		} else {
			open, closing = open+"[", "]"+closing
		}
	}
	return open + `"x"` + closing
}

// TestJSONLimits: every JSON format of the source (Rows, JSONWith, JSON,
// and the changelog formats, key and value) accepts 64 levels of nesting
// and valid UTF-8 (escapes included), and refuses, as a decode error (so the
// on_error policy counts it), 65 or 100 levels and invalid UTF-8 in a
// member name or a string, as docs/KAFKA.md says.
func TestJSONLimits(t *testing.T) {
	formats := map[string]func(value []byte) error{
		"Rows": func(v []byte) error { _, err := kafka.Rows()()(&kgo.Record{Value: v}); return err },
		"JSONWith": func(v []byte) error {
			_, err := kafka.JSONWith(func(v *fastjson.Value) (int, error) { return 0, nil })()(&kgo.Record{Value: v})
			return err
		},
		"JSON": func(v []byte) error { _, err := kafka.JSON[map[string]any]()()(&kgo.Record{Value: v}); return err },
		"upsert-json value": func(v []byte) error {
			_, err := changelogfmt.UpsertJSON.Decoder()()(&kgo.Record{Key: []byte(`{"k":1}`), Value: v})
			return err
		},
		"upsert-json key": func(v []byte) error {
			_, err := changelogfmt.UpsertJSON.Decoder()()(&kgo.Record{Key: v, Value: []byte(`{"k":1}`)})
			return err
		},
	}
	for _, tc := range []struct {
		name  string
		value string
		err   string // "" accepted
	}{
		{"flat", `{"k":1,"name":"caf\u00e9 \ud83d\ude00 ok"}`, ""},
		{"64 levels", nested(64), ""},
		{"65 levels", nested(65), "nested deeper than 64 levels"},
		{"100 levels", nested(100), "nested deeper than 64 levels"},
		{"brackets in strings", `{"k":"` + strings.Repeat("{[", 100) + `"}`, ""},
		{"invalid UTF-8 in a string", "{\"k\":\"a\xff\"}", "not valid UTF-8: invalid byte 0xff at offset 7"},
		{"invalid UTF-8 in a name", "{\"k\xc3\":1}", "not valid UTF-8"},
		{"surrogate encoded as UTF-8", "{\"k\":\"\xed\xa0\x80\"}", "not valid UTF-8"},
	} {
		for name, decode := range formats {
			err := decode([]byte(tc.value))
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("%s, %s: %v, want it accepted", tc.name, name, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("%s, %s: error %v, want %q", tc.name, name, err, tc.err)
			}
		}
	}
}
