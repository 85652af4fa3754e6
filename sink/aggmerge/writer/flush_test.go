package writer

import (
	"log/slog"
	"testing"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// TestFlushAtCheckpoint: with FlushAtCheckpoint the sink writes nothing to
// the table between barriers (its context has no timers: setting one would
// panic) and, at each barrier, one change per key it saw since the last,
// however often the key repeated; CombineKeys still flushes early. The rows
// are the exact sums.
func TestFlushAtCheckpoint(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	cfg := Config{Table: tbl, FlushInterval: FlushAtCheckpoint, CombineKeys: 64}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	s := newSink(cfg)
	if err := s.Open(&runtime.Context{Job: "jobA", Operator: "table", Parallelism: 1, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	// changes counts the rows written (+I and +U entries) since its last
	// call, once the flush in flight, if any, is applied.
	from := tbl.LogEnds()
	changes := func() int {
		t.Helper()
		if err := s.applied(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for b := range from {
			err := tbl.ReadLog(b, from[b], func(e *aggmerge.Entry) error {
				if e.Op == aggmerge.Insert || e.Op == aggmerge.UpdateAfter {
					n++
				}
				from[b] = e.Offset + 1
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	want := map[int64]int64{}
	write := func(keys, repeats int) {
		t.Helper()
		var recs []record
		for r := range repeats {
			for k := range keys {
				key, err := tbl.EncodeKey([]agg.Value{agg.IntValue(int64(k))})
				if err != nil {
					t.Fatal(err)
				}
				want[int64(k)] += int64(r + 1)
				recs = append(recs, record{bucket: int32(aggmerge.BucketOf(key, testBuckets)), key: key, vals: []agg.Value{agg.IntValue(int64(r + 1))}})
			}
		}
		if err := s.Write(recs); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func(id barrier.CheckpointID) int {
		t.Helper()
		if _, err := s.Snapshot(id); err != nil {
			t.Fatal(err)
		}
		n := changes()
		if err := s.NotifyComplete(id); err != nil {
			t.Fatal(err)
		}
		return n
	}

	write(50, 7)
	if n := changes(); n != 0 {
		t.Fatalf("%d rows written before the first barrier, want none", n)
	}
	if n := checkpoint(1); n != 50 {
		t.Fatalf("checkpoint 1 wrote %d rows, want 50 (one per key)", n)
	}
	write(20, 3)
	write(20, 1)
	if n := changes(); n != 0 {
		t.Fatalf("%d rows written between barriers, want none", n)
	}
	if n := checkpoint(2); n != 20 {
		t.Fatalf("checkpoint 2 wrote %d rows, want 20", n)
	}
	write(100, 1) // more keys than CombineKeys: one early flush of 64
	if n := changes(); n != 64 {
		t.Fatalf("the early flush wrote %d rows, want 64", n)
	}
	if n := checkpoint(3); n != 36 {
		t.Fatalf("checkpoint 3 wrote %d rows, want the 36 left", n)
	}
	for k, v := range want {
		row, ok, err := tbl.Get([]agg.Value{agg.IntValue(k)})
		if err != nil || !ok || row.Values[0].Int() != v {
			t.Fatalf("key %d: %v %v %v, want %d", k, row, ok, err, v)
		}
	}
}
