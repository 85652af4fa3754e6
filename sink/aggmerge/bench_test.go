package aggmerge

import (
	"math/rand/v2"
	"testing"

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
// into sum, max and count columns, in batches of 1,000, log included. Run
// with -benchtime=1000000x for the 1M figure.
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
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "upserts/s")
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
