package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/ebbflow/ebbflow/operators"
)

// TestWordsum runs the example and checks every key's total against the
// totals computed directly from the sequence.
func TestWordsum(t *testing.T) {
	const count = 200_000
	dir := t.TempDir()
	out := filepath.Join(dir, "output")
	if err := run(context.Background(), dir, out, count, 2, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	got, err := Totals(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]Total{}
	for seq := uint64(0); seq < count; seq++ {
		v := operators.ValueOf(seq)
		if v > 500 {
			continue
		}
		k := operators.KeyOf(seq, 1000)
		w := want[k]
		want[k] = Total{Key: k, Sum: w.Sum + v, Count: w.Count + 1}
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys, want %d", len(got), len(want))
	}
	for _, g := range got {
		if g != want[g.Key] {
			t.Fatalf("key %d: got %+v, want %+v", g.Key, g, want[g.Key])
		}
	}
}
