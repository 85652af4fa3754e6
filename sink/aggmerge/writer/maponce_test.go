package writer_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// runMapped runs a job of count sequence records at parallelism par into
// tbl through writer.To with mapper.
func runMapped(t *testing.T, tbl *aggmerge.Table, count uint64, par int, mapper writer.Mapper[operators.Event]) {
	t.Helper()
	j := runtime.NewJob(runtime.Options{Name: "maponce", DataDir: t.TempDir(), Parallelism: par, BatchSize: 64,
		Checkpoint: runtime.CheckpointOptions{Interval: 50 * time.Millisecond}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: count}))
	if err := writer.To(src, "table", writer.Config{Table: tbl, BatchSize: 100}, mapper); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := j.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMapperCalledOncePerRecord: writer.To calls the user's mapper exactly
// once per record, with and without combining.
func TestMapperCalledOncePerRecord(t *testing.T) {
	const count = 3000
	tbl, err := aggmerge.Open(t.TempDir(), schema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	var calls atomic.Int64
	runMapped(t, tbl, count, 2, func(e operators.Event, r *writer.Row) error {
		calls.Add(1)
		return mapEvent(e, r)
	})
	if got := calls.Load(); got != count {
		t.Errorf("the mapper ran %d times for %d records, want once per record", got, count)
	}
	checkTable(t, tbl, expected(count))
}

// TestImpureMapperKeepsOneWriterPerBucket: a mapper that gives a record a
// different key on every call cannot make a subtask write a bucket it does
// not own (the record is mapped once, and the key it is routed by is the key
// it is written under): every entry of every bucket's log is its owner's.
func TestImpureMapperKeepsOneWriterPerBucket(t *testing.T) {
	const count, par = 2000, 2
	tbl, err := aggmerge.Open(t.TempDir(), schema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	var mu sync.Mutex
	calls := map[uint64]int{}
	runMapped(t, tbl, count, par, func(e operators.Event, r *writer.Row) error {
		mu.Lock()
		n := calls[e.Seq]
		calls[e.Seq]++
		mu.Unlock()
		if err := mapEvent(e, r); err != nil {
			return err
		}
		r.Key[0] = agg.IntValue(int64(e.Seq+uint64(n)) % keys) // the next key on every call
		return nil
	})
	var total int64
	if err := tbl.Scan(func(row aggmerge.Row) error { total += row.Values[1].Int(); return nil }); err != nil {
		t.Fatal(err)
	}
	if total != count {
		t.Errorf("the table counts %d records, want %d", total, count)
	}
	for b := range schema().Buckets {
		owner := base.WriterID{Job: "maponce", Sink: "table", Subtask: writer.Owner(b, par)}.String()
		foreign := 0
		if err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
			if e.Writer.ID != owner {
				if foreign++; foreign == 1 {
					t.Errorf("bucket %d (owner %s): entry %d written by %s", b, owner, e.Offset, e.Writer.ID)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if foreign > 1 {
			t.Errorf("bucket %d: %d entries written by a writer that does not own it", b, foreign)
		}
	}
}
