package writer

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// internalSeed is crashtest.Seed for the package's internal tests: -seed is
// declared by its external tests.
func internalSeed(t *testing.T) int64 {
	var flagSeed int64
	if f := flag.Lookup("seed"); f != nil {
		flagSeed, _ = strconv.ParseInt(f.Value.String(), 10, 64)
	}
	return crashtest.Seed(t, flagSeed)
}

func combineSchema() aggmerge.Schema {
	i64, bytes := agg.Type{Kind: agg.KindInt64}, agg.Type{Kind: agg.KindBytes}
	return aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "k", Type: i64}},
		Values: []aggmerge.Column{
			{Name: "ids", Type: bytes, Func: "rbm32"},
			{Name: "ids64", Type: bytes, Func: "rbm64"},
			{Name: "approx", Type: bytes, Func: "hll"},
			{Name: "total", Type: i64, Func: "sum"},
			{Name: "n", Type: i64, Func: "count"},
			{Name: "seqs", Type: agg.Type{Kind: agg.KindString}, Func: "listagg"},
		},
		Buckets: 4,
	}
}

// TestCombinerEqualsPlainWrites writes the same random records into two
// tables, one through the combiner (drained after a random number of
// records, as flushes would) and one record by record, and checks that the
// tables are equal, and that the rbm32 and count columns hold exactly the
// ids and the number of non-null inputs of each key.
func TestCombinerEqualsPlainWrites(t *testing.T) {
	seed := internalSeed(t)
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	open := func() *aggmerge.Table {
		tb, err := aggmerge.Open(t.TempDir(), combineSchema(), aggmerge.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tb.Close() })
		return tb
	}
	combined, plain := open(), open()
	cb, err := combined.NewBatch(aggmerge.Writer{ID: "combined", Epoch: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := plain.NewBatch(aggmerge.Writer{ID: "plain", Epoch: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCombiner(combined, []int{0, 1, 2, 3, 4, 5}, false)
	apply := func(tb *aggmerge.Table, b *aggmerge.Batch) {
		t.Helper()
		if _, err := tb.Apply(b); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		b.Reset()
	}
	wantIDs, wantN := map[int64][]uint32{}, map[int64]int64{}
	var keyBuf []byte
	nextDrain := 1 + r.IntN(500)
	for i := range 6000 {
		k := int64(r.IntN(1 + r.IntN(50))) // skewed: low keys repeat most
		id := uint32(r.IntN(5000)) << (16 * r.IntN(2))
		vals := []agg.Value{agg.Bitmap32Value(id), agg.Bitmap64Value(uint64(id) << r.IntN(40)),
			agg.HLLValue(fmt.Appendf(nil, "u%d", id)), agg.IntValue(int64(id % 100)), agg.IntValue(1), agg.StringValue(fmt.Sprint(i))}
		ids, n := []uint32{id}, int64(1)
		switch r.IntN(20) {
		case 0: // a many-id sketch
			ids = append(ids, id+1, id+7)
			vals[0], vals[2] = agg.Bitmap32Value(ids...), agg.HLLValue([]byte("x"), []byte("y"))
		case 1: // nulls
			ids, n = nil, 0
			for j := range vals {
				vals[j] = agg.NullValue()
			}
		}
		wantIDs[k] = append(wantIDs[k], ids...)
		wantN[k] += n
		key := []agg.Value{agg.IntValue(k)}
		if keyBuf, err = combined.AppendKey(keyBuf[:0], key); err != nil {
			t.Fatal(err)
		}
		if err := c.add(keyBuf, vals); err != nil {
			t.Fatal(err)
		}
		if err := pb.Upsert(aggmerge.Aggregate, key, vals); err != nil {
			t.Fatal(err)
		}
		if pb.Len() == 1000 {
			apply(plain, pb)
		}
		if i+1 == nextDrain {
			if err := c.drain(cb); err != nil {
				t.Fatal(err)
			}
			apply(combined, cb)
			nextDrain += 1 + r.IntN(500)
		}
	}
	if err := c.drain(cb); err != nil {
		t.Fatal(err)
	}
	apply(combined, cb)
	apply(plain, pb)

	rows := func(tb *aggmerge.Table) map[int64][]agg.Value {
		m := map[int64][]agg.Value{}
		if err := tb.Scan(func(row aggmerge.Row) error {
			m[row.Key[0].Int()] = slices.Clone(row.Values)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return m
	}
	got, want := rows(combined), rows(plain)
	if len(got) != len(want) || len(got) != len(wantN) {
		t.Fatalf("seed %d: %d rows combined, %d plain, %d keys written", seed, len(got), len(want), len(wantN))
	}
	for k, w := range want {
		g := got[k]
		for j, col := range combineSchema().Values {
			if !g[j].Equal(w[j]) {
				t.Errorf("seed %d: key %d column %s: combined %v, plain %v", seed, k, col.Name, g[j], w[j])
			}
		}
		bm, err := agg.Bitmap32(g[0])
		if err != nil {
			t.Fatal(err)
		}
		ids := wantIDs[k]
		slices.Sort(ids)
		if ids = slices.Compact(ids); !slices.Equal(bm.ToArray(), ids) {
			t.Errorf("seed %d: key %d: rbm32 holds %d ids, want %d", seed, k, bm.GetCardinality(), len(ids))
		}
		if g[4].Int() != wantN[k] {
			t.Errorf("seed %d: key %d: count %d, want %d", seed, k, g[4].Int(), wantN[k])
		}
	}
}

// BenchmarkCombiner: the combiner alone (the key's encoding, add, and a drain
// into a batch every 100k records), for plain columns over 100k uniform keys and for the
// visitors example's sketches over 5 keys. ns/op is per record.
func BenchmarkCombiner(b *testing.B) {
	i64, bytes := agg.Type{Kind: agg.KindInt64}, agg.Type{Kind: agg.KindBytes}
	plain := []aggmerge.Column{{Name: "total", Type: i64, Func: "sum"}, {Name: "n", Type: i64, Func: "count"}, {Name: "top", Type: i64, Func: "max"}}
	plainVals := func(r *rand.Rand) []agg.Value {
		v := agg.IntValue(int64(r.IntN(1000)))
		return []agg.Value{v, v, v}
	}
	for _, bc := range []struct {
		name string
		cols []aggmerge.Column
		keys int
		vals func(r *rand.Rand) []agg.Value
	}{
		{"plain-100k-keys", plain, 100_000, plainVals},
		{"plain-1k-keys", plain, 1000, plainVals},
		{"sketches", []aggmerge.Column{{Name: "ids", Type: bytes, Func: "rbm32"}, {Name: "approx", Type: bytes, Func: "hll"}, {Name: "n", Type: i64, Func: "count"}},
			5, func(r *rand.Rand) []agg.Value {
				id := uint32(1 + r.IntN(5000))
				return []agg.Value{agg.Bitmap32Value(id), agg.HLLValue(fmt.Append(nil, id)), agg.IntValue(1)}
			}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			schema := aggmerge.Schema{Key: []aggmerge.Column{{Name: "k", Type: i64}}, Values: bc.cols, Buckets: 8}
			tb, err := aggmerge.Open(b.TempDir(), schema, aggmerge.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer tb.Close()
			batch, err := tb.NewBatch(aggmerge.Writer{ID: "bench", Epoch: 1}, nil)
			if err != nil {
				b.Fatal(err)
			}
			c := newCombiner(tb, []int{0, 1, 2}, false)
			r := rand.New(rand.NewPCG(1, 2))
			const n = 1 << 16 // inputs made before timing
			keys, vals := make([][]agg.Value, n), make([][]agg.Value, n)
			for i := range n {
				keys[i], vals[i] = []agg.Value{agg.IntValue(int64(r.IntN(bc.keys)))}, bc.vals(r)
			}
			var keyBuf []byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if keyBuf, err = tb.AppendKey(keyBuf[:0], keys[i%n]); err != nil {
					b.Fatal(err)
				}
				if err := c.add(keyBuf, vals[i%n]); err != nil {
					b.Fatal(err)
				}
				if i%100_000 == 99_999 || i == b.N-1 {
					if err := c.drain(batch); err != nil {
						b.Fatal(err)
					}
					batch.Reset()
				}
			}
		})
	}
}
