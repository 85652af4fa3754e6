package changelogfmt

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// TestRoundTrip encodes an insert, an update and a delete in each format,
// decodes the records and normalizes them as a reader does, and gets the
// same rows back: kind, key and image (an update's -U with its
// before-image, then its +U).
func TestRoundTrip(t *testing.T) {
	key := []byte(`{"user":"ada \"the\" first"}`)
	v1 := []byte(`{"user":"ada \"the\" first","total":1,"tags":["a","b"]}`)
	v2 := []byte(`{"user":"ada \"the\" first","total":2.5,"tags":[]}`)
	src := Source{Table: "orders", Bucket: 3, LogOffset: 7, Checkpoint: 2}
	at := time.UnixMilli(1_735_776_000_123)
	entries := []Entry{
		{Op: runtime.RowInsert, Key: key, After: v1, Source: src, Time: at},
		{Op: runtime.RowUpdateAfter, Key: key, Before: v1, After: v2, Source: src, Time: at},
		{Op: runtime.RowDelete, Key: key, Before: v2, Source: src, Time: at},
	}
	show := func(k runtime.RowKind, key, row string) string {
		return fmt.Sprintf("%s key=%s row=%s", k, key, row)
	}
	want := []string{
		show(runtime.RowInsert, string(key), string(v1)),
		show(runtime.RowUpdateBefore, string(key), string(v1)),
		show(runtime.RowUpdateAfter, string(key), string(v2)),
		show(runtime.RowDelete, string(key), string(v2)),
	}
	for _, f := range formats {
		t.Run(f.Name(), func(t *testing.T) {
			dec := f.Decoder()()
			var n kafka.Normalizer
			var got []string
			for i := range entries {
				recs, _ := f.Append(nil, nil, &entries[i])
				for j := range recs {
					r := &recs[j]
					c, err := dec(r)
					if err != nil {
						t.Fatalf("decode %s / %s: %v", r.Key, r.Value, err)
					}
					c, ok := n.Normalize(c)
					if !ok {
						continue
					}
					if err := c.Rows(func(k runtime.RowKind, row kafka.Row) error {
						got = append(got, show(k, c.Key.String(), row.String()))
						return nil
					}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("round trip:\n  %q\nwant:\n  %q", got, want)
			}
		})
	}
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
