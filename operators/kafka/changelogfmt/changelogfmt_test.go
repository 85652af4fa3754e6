package changelogfmt

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// changelogRows decodes records with f, normalizes them, and returns the
// +I/-U/+U/-D rows as "kind key row" lines.
func changelogRows(t *testing.T, f kafka.Format[kafka.Change], recs ...*kgo.Record) []string {
	t.Helper()
	dec := f()
	var n kafka.Normalizer
	var out []string
	for _, r := range recs {
		c, err := dec(r)
		if err != nil {
			t.Fatalf("decode %s / %s: %v", r.Key, r.Value, err)
		}
		c, ok := n.Normalize(c)
		if !ok {
			continue
		}
		err = c.Rows(func(k runtime.RowKind, row kafka.Row) error {
			out = append(out, fmt.Sprintf("%s %s %s", k, c.Key, row))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func rec(key, value string) *kgo.Record {
	r := &kgo.Record{}
	if key != "" {
		r.Key = []byte(key)
	}
	if value != "" {
		r.Value = []byte(value)
	}
	return r
}

func wantRows(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("rows:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestUpsertJSONNormalized: upserts become +I, then -U/+U with the
// remembered row; a repeated row changes nothing; a tombstone becomes -D
// with the last row, and a tombstone of an unknown key nothing.
func TestUpsertJSONNormalized(t *testing.T) {
	k1, k2 := `{"user":"ada"}`, `{"user":"bob"}`
	got := changelogRows(t, UpsertJSON.Decoder(),
		rec(k1, `{"user":"ada","total":1}`),
		rec(k2, `{"user":"bob","total":5}`),
		rec(k1, `{"user":"ada","total":3}`),
		rec(k1, `{"user":"ada","total":3}`),
		rec(k2, ""),
		rec(`{"user":"eve"}`, ""),
		rec(k2, `{"user":"bob","total":7}`),
	)
	wantRows(t, got,
		`+I {"user":"ada"} {"user":"ada","total":1}`,
		`+I {"user":"bob"} {"user":"bob","total":5}`,
		`-U {"user":"ada"} {"user":"ada","total":1}`,
		`+U {"user":"ada"} {"user":"ada","total":3}`,
		`-D {"user":"bob"} {"user":"bob","total":5}`,
		`+I {"user":"bob"} {"user":"bob","total":7}`,
	)
}

func TestDebeziumJSON(t *testing.T) {
	k := `{"user":"ada"}`
	got := changelogRows(t, DebeziumJSON.Decoder(),
		rec(k, `{"before":null,"after":{"user":"ada","total":1},"op":"c","ts_ms":1}`),
		rec(k, `{"before":{"user":"ada","total":1},"after":{"user":"ada","total":4},"op":"u","ts_ms":2,"source":{"table":"t"}}`),
		rec(k, `{"schema":{},"payload":{"before":{"user":"ada","total":4},"after":null,"op":"d"}}`),
		rec(k, ""), // the tombstone after the delete
		rec("", `{"after":{"user":"bob","total":2},"op":"r"}`),
	)
	wantRows(t, got,
		`+I {"user":"ada"} {"user":"ada","total":1}`,
		`-U {"user":"ada"} {"user":"ada","total":1}`,
		`+U {"user":"ada"} {"user":"ada","total":4}`,
		`-D {"user":"ada"} {"user":"ada","total":4}`,
		`+I {} {"user":"bob","total":2}`,
	)
}

func TestChangelogDecodeErrors(t *testing.T) {
	cases := []struct {
		f          kafka.Format[kafka.Change]
		key, value string
		want       string
	}{
		{UpsertJSON.Decoder(), "", `{"a":1}`, "no key"},
		{UpsertJSON.Decoder(), `{"a":1}`, `[1]`, "not a JSON object"},
		{UpsertJSON.Decoder(), `nope`, `{"a":1}`, "changelog key"},
		{DebeziumJSON.Decoder(), `{"a":1}`, `{"before":null,"after":{"a":1},"op":"u"}`, `"before" is null`},
		{DebeziumJSON.Decoder(), `{"a":1}`, `{"before":null,"after":null,"op":"d"}`, `"before" is null`},
		{DebeziumJSON.Decoder(), `{"a":1}`, `{"after":null,"op":"c"}`, `without "after"`},
		{DebeziumJSON.Decoder(), `{"a":1}`, `{"after":{"a":1},"op":"x"}`, `unknown op "x"`},
		{DebeziumJSON.Decoder(), `{"a":1}`, `{"after":`, "debezium-json value"},
	}
	for _, c := range cases {
		_, err := c.f()(rec(c.key, c.value))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("key %s value %s: error %v, want it to contain %q", c.key, c.value, err, c.want)
		}
	}
	if _, err := DebeziumJSON.Decoder()()(rec(`{"a":1}`, `{"before":null,"after":{"a":1},"op":"u"}`)); !errors.Is(err, errBeforeNeeded) {
		t.Errorf("update without before: %v, want errBeforeNeeded", err)
	}
}

// TestNormalizerRemembersCopies: decoded rows share memory with later
// ones; the remembered row must not change when the decoder reuses it.
func TestNormalizerRemembersCopies(t *testing.T) {
	dec := UpsertJSON.Decoder()()
	var n kafka.Normalizer
	var before []string
	for i := range 3000 { // enough to fill and replace decoder chunks
		c, err := dec(rec(fmt.Sprintf(`{"k":%d}`, i%2), fmt.Sprintf(`{"k":%d,"v":"value-%d"}`, i%2, i)))
		if err != nil {
			t.Fatal(err)
		}
		c, ok := n.Normalize(c)
		if ok && c.Op == kafka.ChangeUpdate {
			before = append(before, c.Before.String())
		}
	}
	for i, b := range before {
		if want := fmt.Sprintf(`{"k":%d,"v":"value-%d"}`, i%2, i); b != want {
			t.Fatalf("update %d: before %s, want %s", i, b, want)
		}
	}
	if n.Len() != 2 {
		t.Fatalf("%d keys remembered, want 2", n.Len())
	}
}
