package aggmerge

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/cputime"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

func benchSchema() Schema {
	return Schema{
		Key: []Column{{Name: "id", Type: agg.Int64}},
		Values: []Column{
			{Name: "total", Type: agg.Int64, Func: "sum"},
			{Name: "peak", Type: agg.Int64, Func: "max"},
			{Name: "n", Type: agg.Int64, Func: "count"},
		},
		Buckets: 16,
	}
}

// BenchmarkUpsert is the reference workload: upserts over 100k uniform keys
// into sum, max and count columns, in batches of 1,000, log included, with
// a Sync (which stores the changed rows) every 250 batches and at the end,
// as a writer checkpointing every second at ~250k upserts/s would. Run with
// -benchtime=1000000x for the 1M figure.
func BenchmarkUpsert(b *testing.B) {
	t, err := Open(b.TempDir(), benchSchema(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	batch, err := t.NewBatch(Writer{ID: "bench", Epoch: 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	key := make([]agg.Value, 1)
	vals := make([]agg.Value, 3)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	for i := range b.N {
		key[0] = agg.IntValue(int64(rng.IntN(100_000)))
		v := agg.IntValue(int64(rng.IntN(1000)))
		vals[0], vals[1], vals[2] = v, v, v
		if err := batch.Upsert(Aggregate, key, vals); err != nil {
			b.Fatal(err)
		}
		if batch.Len() == 1000 || i == b.N-1 {
			if _, err := t.Apply(batch); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
			if (i+1)%250_000 == 0 || i == b.N-1 {
				if err := t.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "upserts/s")
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
	m := t.Metrics()
	var written uint64
	for _, l := range m.Levels {
		written += l.TableBytesFlushed + l.TableBytesCompacted
	}
	b.ReportMetric(float64(m.WAL.BytesWritten)/float64(b.N), "walB/op")
	b.ReportMetric(float64(written+m.WAL.BytesWritten)/float64(b.N), "diskB/op")
	total := m.Total()
	b.ReportMetric(total.WriteAmp(), "wamp")
}

// filledTable returns a table of n rows of the bench schema.
func filledTable(b *testing.B, n int) *Table {
	t, err := Open(b.TempDir(), benchSchema(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	batch, _ := t.NewBatch(Writer{ID: "fill"}, nil)
	for i := range n {
		v := agg.IntValue(int64(i))
		_ = batch.Upsert(Aggregate, []agg.Value{agg.IntValue(int64(i))}, []agg.Value{v, v, v})
		if batch.Len() == 1000 || i == n-1 {
			if _, err := t.Apply(batch); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	return t
}

// BenchmarkGet is a point get of 100k keys, answered by the row cache.
func BenchmarkGet(b *testing.B) {
	t := filledTable(b, 100_000)
	defer t.Close()
	key := make([]agg.Value, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		key[0] = agg.IntValue(int64(i % 100_000))
		if _, ok, err := t.Get(key); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
}

// BenchmarkScan is a full scan of 100k rows (from pebble, not the cache).
func BenchmarkScan(b *testing.B) {
	t := filledTable(b, 100_000)
	defer t.Close()
	b.ReportAllocs()
	b.ResetTimer()
	rows := 0
	for range b.N {
		if err := t.Scan(func(Row) error { rows++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkReadLog reads a bucket's log of 1M upserts over 100k keys from
// offset 0, decoding every entry (what undo and the exporter do).
func BenchmarkReadLog(b *testing.B) {
	t, err := Open(b.TempDir(), Schema{Key: benchSchema().Key, Values: benchSchema().Values, Buckets: 1}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	batch, _ := t.NewBatch(Writer{ID: "fill"}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1_000_000 {
		v := agg.IntValue(int64(rng.IntN(1000)))
		_ = batch.Upsert(Aggregate, []agg.Value{agg.IntValue(int64(rng.IntN(100_000)))}, []agg.Value{v, v, v})
		if batch.Len() == 1000 || i == 999_999 {
			if _, err := t.Apply(batch); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	entries := 0
	for range b.N {
		if err := t.ReadLog(0, 0, func(*Entry) error { entries++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(entries)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkSync is the barrier cost: one batch of 1,000 upserts, then Sync.
func BenchmarkSync(b *testing.B) {
	t, err := Open(b.TempDir(), benchSchema(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	batch, _ := t.NewBatch(Writer{ID: "bench"}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	var syncNs int64
	b.ResetTimer()
	for range b.N {
		for range 1000 {
			v := agg.IntValue(int64(rng.IntN(1000)))
			_ = batch.Upsert(Aggregate, []agg.Value{agg.IntValue(int64(rng.IntN(100_000)))}, []agg.Value{v, v, v})
		}
		if _, err := t.Apply(batch); err != nil {
			b.Fatal(err)
		}
		batch.Reset()
		start := time.Now()
		if err := t.Sync(); err != nil {
			b.Fatal(err)
		}
		syncNs += time.Since(start).Nanoseconds()
	}
	b.ReportMetric(float64(syncNs)/float64(b.N)/1e6, "sync-ms")
}

// BenchmarkStoreRows is the storer's work after a checkpoint: 100k dirty
// rows of random keys (the peers job's 100k users, each changed within the
// second) taken, sorted and written into pebble. ns/op is per row; the
// Applies that make the rows dirty are not timed.
func BenchmarkStoreRows(b *testing.B) {
	t, err := Open(b.TempDir(), benchSchema(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	batch, _ := t.NewBatch(Writer{ID: "bench", Epoch: 1}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	const rows = 100_000
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += rows {
		b.StopTimer()
		for _, k := range rng.Perm(rows) {
			v := agg.IntValue(int64(rng.IntN(1000)))
			_ = batch.Upsert(Aggregate, []agg.Value{agg.IntValue(int64(k))}, []agg.Value{v, v, v})
			if batch.Len() == 1000 {
				if _, err := t.Apply(batch); err != nil {
					b.Fatal(err)
				}
				batch.Reset()
			}
		}
		b.StartTimer()
		cpu0 := cputime.Process()
		t.store.mu.Lock()
		err := t.storeRows(false)
		t.store.mu.Unlock()
		cpu += cputime.Process() - cpu0
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}
