package aggmerge

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// writeMany appends one batch per write to every bucket, so chunks are one
// entry long and truncation is exact.
func writeMany(t *testing.T, tbl *Table, w Writer, n int) {
	t.Helper()
	b, err := tbl.NewBatch(w, []string{"n"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := b.Upsert(Aggregate, key(fmt.Sprint("k", i)), []agg.Value{agg.IntValue(1)}); err != nil {
			t.Fatal(err)
		}
		mustApply(t, tbl, b)
	}
}

func starts(t *testing.T, tbl *Table) []uint64 {
	t.Helper()
	var out []uint64
	for b := 0; b < tbl.Schema().Buckets; b++ {
		s, _, err := tbl.LogOffsets(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestRetentionHolds(t *testing.T) {
	tbl, err := Open(t.TempDir(), smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	epoch, err := tbl.Register("job", "job/sink#0", []string{"n"})
	if err != nil {
		t.Fatal(err)
	}
	writeMany(t, tbl, Writer{ID: "job/sink#0", Epoch: epoch}, 40)
	ends := tbl.LogEnds()

	// A registered writer that holds nothing keeps the whole log.
	if err := tbl.TruncateHeld(); err != nil {
		t.Fatal(err)
	}
	if s := starts(t, tbl); s[0] != 0 || s[1] != 0 {
		t.Fatalf("truncated %v without any hold", s)
	}
	// Its sink holds bucket 0 only: bucket 1 stays whole.
	if err := tbl.Hold(HolderOf("job/sink#0"), map[int]uint64{0: 3}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.TruncateHeld(); err != nil {
		t.Fatal(err)
	}
	if s := starts(t, tbl); s[0] != 3 || s[1] != 0 {
		t.Fatalf("log starts %v, want [3 0]", s)
	}
	// A second holder (an exporter) behind the writer holds the log back.
	if err := tbl.Hold("export", map[int]uint64{0: 5, 1: 2}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Hold("job/sink", map[int]uint64{0: ends[0], 1: ends[1]}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.TruncateHeld(); err != nil {
		t.Fatal(err)
	}
	if s := starts(t, tbl); s[0] != 5 || s[1] != 2 {
		t.Fatalf("log starts %v, want [5 2] (the exporter's holds)", s)
	}
	// Entries at and above every hold remain readable.
	for b, from := range []uint64{5, 2} {
		n := 0
		if err := tbl.ReadLog(b, from, func(*Entry) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if uint64(n) != ends[b]-from {
			t.Fatalf("bucket %d: %d entries from %d, want %d", b, n, from, ends[b]-from)
		}
	}
}

// TestRowsAtPastRetention: rows as of log ends below the retained log
// start are refused with ErrBelowLogStart, not given wrong.
func TestRowsAtPastRetention(t *testing.T) {
	tbl, err := Open(t.TempDir(), smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	w := Writer{ID: "plain"}
	writeMany(t, tbl, w, 10)
	old := tbl.LogEnds()
	writeMany(t, tbl, w, 10)
	if err := tbl.Truncate(0, tbl.LogEnds()[0]); err != nil {
		t.Fatal(err)
	}
	if s := starts(t, tbl); s[0] <= old[0] {
		t.Fatalf("log of bucket 0 starts at %d after truncation, want past %d", s[0], old[0])
	}
	if _, err := tbl.RowsAt(old); !errors.Is(err, ErrBelowLogStart) {
		t.Fatalf("RowsAt below the log start: %v, want ErrBelowLogStart", err)
	}
	rs, err := tbl.RowsAt(tbl.LogEnds())
	n := 0
	if err == nil {
		err = rs.Each(func([]byte, Row) error { n++; return nil })
	}
	if err != nil || n != 10 || rs.Len() != 10 {
		t.Fatalf("RowsAt at the log ends: %d rows, %v; want 10", n, err)
	}
}
