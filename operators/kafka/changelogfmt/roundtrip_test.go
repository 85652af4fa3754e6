package changelogfmt

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/operators/kafka"
)

// TestRoundTrip encodes an insert, an update and a delete in each format,
// decodes the records and normalizes them as a reader does, and gets the
// same changes back: op, key and both images.
func TestRoundTrip(t *testing.T) {
	key := []byte(`{"user":"ada \"the\" first"}`)
	v1 := []byte(`{"user":"ada \"the\" first","total":1,"tags":["a","b"]}`)
	v2 := []byte(`{"user":"ada \"the\" first","total":2.5,"tags":[]}`)
	src := Source{Table: "orders", Bucket: 3, LogOffset: 7, Checkpoint: 2}
	at := time.UnixMilli(1_735_776_000_123)
	entries := []Entry{
		{Op: kafka.ChangeInsert, Key: key, After: v1, Source: src, Time: at},
		{Op: kafka.ChangeUpdate, Key: key, Before: v1, After: v2, Source: src, Time: at},
		{Op: kafka.ChangeDelete, Key: key, Before: v2, Source: src, Time: at},
	}
	show := func(op kafka.ChangeOp, key, before, after string) string {
		return fmt.Sprintf("%s key=%s before=%s after=%s", op, key, before, after)
	}
	var want []string
	for _, e := range entries {
		want = append(want, show(e.Op, string(e.Key), orEmpty(e.Before), orEmpty(e.After)))
	}
	for _, f := range formats {
		t.Run(f.Name(), func(t *testing.T) {
			dec := f.Decoder()()
			var n kafka.Normalizer
			var got []string
			for i := range entries {
				for _, r := range f.Append(nil, &entries[i]) {
					c, err := dec(r)
					if err != nil {
						t.Fatalf("decode %s / %s: %v", r.Key, r.Value, err)
					}
					if c, ok := n.Normalize(c); ok {
						got = append(got, show(c.Op, c.Key.String(), rowOrEmpty(c.Before), rowOrEmpty(c.After)))
					}
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("round trip:\n  %q\nwant:\n  %q", got, want)
			}
		})
	}
}

func orEmpty(b []byte) string {
	if b == nil {
		return "-"
	}
	return string(b)
}

func rowOrEmpty(r kafka.Row) string {
	if r.Len() == 0 {
		return "-"
	}
	return r.String()
}

// TestLookup finds every format by its name and refuses another.
func TestLookup(t *testing.T) {
	for _, f := range formats {
		if g, err := Lookup(f.Name()); err != nil || g != f {
			t.Errorf("Lookup(%q) = %v, %v", f.Name(), g, err)
		}
	}
	if _, err := Lookup("avro"); err == nil {
		t.Error("Lookup(avro): no error")
	}
}
