package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Undo benchmarks: a table of 100k keys, each written once before the
// baseline, then n log entries past it (n/2 updates spread over the keys),
// in 1 or 8 buckets. Run with
//
//	go test ./sink/aggmerge/writer -run '^$' -bench 'Undo|RestartToFirstRecord' -benchtime 1x
//
// entries/s is the log entries scanned per second of the sink's whole
// restore (checks, scan, undo writes, markers, sync; also ns/op);
// scan-entries/s the rate of planning alone (reading the log, no writes),
// timed after the restore on the same range.

const benchKeys = 100_000

func benchSchema(buckets int) aggmerge.Schema {
	i64 := agg.Type{Kind: agg.KindInt64}
	return aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "k", Type: i64}},
		Values: []aggmerge.Column{
			{Name: "total", Type: i64, Func: "sum"},
			{Name: "n", Type: i64, Func: "count"},
			{Name: "top", Type: i64, Func: "max"},
		},
		Buckets: buckets,
	}
}

// benchWrite writes n updates as writer id, round-robin over the keys from
// key start, in batches of 1000.
func benchWrite(b *testing.B, tbl *aggmerge.Table, id string, start, n int) {
	b.Helper()
	batch, err := tbl.NewBatch(aggmerge.Writer{ID: id, Epoch: 1 << 40}, nil)
	if err != nil {
		b.Fatal(err)
	}
	key, vals := make([]agg.Value, 1), make([]agg.Value, 3)
	for i := range n {
		k := int64((start + i) % benchKeys)
		key[0] = agg.IntValue(k)
		vals[0], vals[1], vals[2] = agg.IntValue(int64(i%7)), agg.IntValue(1), agg.IntValue(int64(i))
		if err := batch.Upsert(aggmerge.Aggregate, key, vals); err != nil {
			b.Fatal(err)
		}
		if batch.Len() == 1000 || i == n-1 {
			if _, err := tbl.Apply(batch); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
}

func BenchmarkUndo(b *testing.B) {
	for _, entries := range []int{100_000, 1_000_000} {
		for _, buckets := range []int{1, 8} {
			b.Run(fmt.Sprintf("entries=%dk/buckets=%d", entries/1000, buckets), func(b *testing.B) {
				var total, scan time.Duration
				for range b.N {
					b.StopTimer()
					tbl, err := aggmerge.Open(b.TempDir(), benchSchema(buckets), aggmerge.Options{})
					if err != nil {
						b.Fatal(err)
					}
					benchWrite(b, tbl, "jobA/table#0", 0, benchKeys)
					s, err := openSink(tbl, 0, 1, nil)
					if err != nil {
						b.Fatal(err)
					}
					st, err := s.Snapshot(1)
					if err != nil {
						b.Fatal(err)
					}
					benchWrite(b, tbl, "jobA/table#0", 0, entries/2) // an update is two entries
					if err := tbl.Sync(); err != nil {
						b.Fatal(err)
					}
					ends := tbl.LogEnds()
					b.StartTimer()
					start := time.Now()
					if _, err := openSink(tbl, 0, 1, st.Unions[stateList]); err != nil {
						b.Fatal(err)
					}
					total += time.Since(start)
					b.StopTimer()
					base := decodeBaselines(b, st.Unions[stateList])
					start = time.Now()
					for bk, end := range ends {
						if _, err := planUndo(tbl, bk, base[bk], end, "jobA/table", []int{0, 1, 2}); err != nil {
							b.Fatal(err)
						}
					}
					scan += time.Since(start)
					b.StopTimer()
					if err := tbl.Close(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(entries)*float64(b.N)/total.Seconds(), "entries/s")
				b.ReportMetric(float64(entries)*float64(b.N)/scan.Seconds(), "scan-entries/s")
			})
		}
	}
}

// BenchmarkRestartToFirstRecord restores a job whose sink wrote 100k log
// entries past its checkpoint and measures the time from Run to the first
// record reaching the sink: checkpoint restore, undo, source start.
func BenchmarkRestartToFirstRecord(b *testing.B) {
	const entries = 100_000
	var total time.Duration
	for range b.N {
		b.StopTimer()
		tbl, err := aggmerge.Open(b.TempDir(), benchSchema(8), aggmerge.Options{})
		if err != nil {
			b.Fatal(err)
		}
		dataDir := b.TempDir()
		benchWrite(b, tbl, "bench/table#0", 0, benchKeys)
		// A first run stops at once with a checkpoint; then the sink's
		// writes past it are made directly, as a crashed run leaves them.
		if err := benchJob(tbl, dataDir, func(j *runtime.Job) { j.Stop() }, nil); err != nil {
			b.Fatal(err)
		}
		benchWrite(b, tbl, "bench/table#0", 0, entries/2)
		if err := tbl.Sync(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		var once sync.Once
		first := make(chan struct{})
		err = benchJob(tbl, dataDir, func(j *runtime.Job) {
			<-first
			total += time.Since(start)
			j.Stop()
		}, func() { once.Do(func() { close(first) }) })
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if n := undoEntries(b, tbl); n < entries {
			b.Fatalf("the restart wrote %d undo entries, want at least %d", n, entries)
		}
		if err := tbl.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/restart")
}

// benchJob runs job "bench" (sequence → writer of every column) until
// control, called in a goroutine with the job, stops it; onRecord is called
// by the sink's mapper for every record.
func benchJob(tbl *aggmerge.Table, dataDir string, control func(*runtime.Job), onRecord func()) error {
	j := runtime.NewJob(runtime.Options{Name: "bench", DataDir: dataDir, Parallelism: 1,
		Restart: runtime.RestartOptions{MaxAttempts: -1}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Rate: 10_000}))
	mapper := func(e operators.Event, r *Row) error {
		if onRecord != nil {
			onRecord()
		}
		r.Key = append(r.Key[:0], agg.IntValue(int64(e.Seq%benchKeys)))
		r.Vals = append(r.Vals[:0], agg.IntValue(e.Value), agg.IntValue(1), agg.IntValue(e.Value))
		return nil
	}
	if err := To(src, "table", Config{Table: tbl}, mapper); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { control(j) })
	err := j.Run(ctx)
	wg.Wait()
	return err
}

// undoEntries counts the log entries flagged undo.
func undoEntries(b *testing.B, tbl *aggmerge.Table) int {
	n := 0
	for bk := range tbl.Schema().Buckets {
		err := tbl.ReadLog(bk, 0, func(e *aggmerge.Entry) error {
			if e.Undo && e.Op != aggmerge.MarkerEntry {
				n++
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return n
}

func decodeBaselines(b *testing.B, items [][]byte) map[int]uint64 {
	base := map[int]uint64{}
	for _, raw := range items {
		var s snapshotState
		if err := json.Unmarshal(raw, &s); err != nil {
			b.Fatal(err)
		}
		maps.Copy(base, s.Baselines)
	}
	return base
}
