//go:build invariants

package state

import (
	"strings"
	"testing"
)

// TestDirtyListChecked: with the invariants tag, a flush whose dirty list
// lost a key (the bug that would drop its write) panics, and one that lists
// a key twice does too; a sound cache flushes.
func TestDirtyListChecked(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		corrupt    func(tb *table[int, int])
	}{
		{"sound", "", func(*table[int, int]) {}},
		{"key missing", "dirty but not listed", func(tb *table[int, int]) { tb.dirty = tb.dirty[1:] }},
		{"key twice", "listed dirty twice", func(tb *table[int, int]) { tb.dirty = append(tb.dirty, tb.dirty[0]) }},
		{"clean key listed", "its cache entry is not", func(tb *table[int, int]) { tb.dirty = append(tb.dirty, 1000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kd := newTestKeyed(t, 1000)
			vals := NewValue(kd, "v", IntCodec{}, IntCodec{})
			for k := range 10 {
				if err := vals.Put(k, k); err != nil {
					t.Fatal(err)
				}
			}
			tc.corrupt(vals.t)
			var got string
			func() {
				defer func() {
					if r := recover(); r != nil {
						got, _ = r.(string)
						if got == "" {
							t.Fatalf("panicked with %v", r)
						}
					}
				}()
				if err := kd.Flush(); err != nil {
					t.Fatal(err)
				}
			}()
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("flush: panic %q, want one naming %q", got, tc.want)
			}
		})
	}
}
