package writer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// TestKeyIndexModel adds random keys (of random lengths, the empty key
// included, many repeated) to a keyIndex and a map, through growth and
// resets, and checks that every find agrees with the map.
func TestKeyIndexModel(t *testing.T) {
	seed := internalSeed(t)
	r := rand.New(rand.NewPCG(uint64(seed), 17))
	x := newKeyIndex()
	var keys [][]byte
	model := map[string]int{}
	keyOf := func(slot int) []byte { return keys[slot] }
	for round := range 4 {
		n := 1 + r.IntN(20_000)
		for range n {
			k := fmt.Appendf(nil, "%0*d", r.IntN(12), r.IntN(n))
			slot, hash := x.find(k, keyOf)
			want, ok := model[string(k)]
			if !ok {
				want = -1
			}
			if slot != want {
				t.Fatalf("seed %d round %d: find(%q) = %d, want %d", seed, round, k, slot, want)
			}
			if slot < 0 {
				model[string(k)] = len(keys)
				keys = append(keys, k)
				x.insert(hash, len(keys)-1, keyOf)
			}
		}
		if x.n != len(model) {
			t.Fatalf("seed %d round %d: index holds %d keys, want %d", seed, round, x.n, len(model))
		}
		x.reset()
		keys, model = keys[:0], map[string]int{}
	}
}

// TestCombinerAddAllocates: once its slices have grown, the combiner adds a
// key it has not seen since the last drain without allocating (the map it
// used before allocated each such key's string: 1 allocation per add).
func TestCombinerAddAllocates(t *testing.T) {
	tb, err := aggmerge.Open(t.TempDir(), benchLikeSchema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	batch, err := tb.NewBatch(aggmerge.Writer{ID: "allocs", Epoch: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCombiner(tb, []int{0, 1, 2}, false)
	const n = 1000
	keys := make([][]byte, n)
	for i := range keys {
		if keys[i], err = tb.AppendKey(nil, []agg.Value{agg.IntValue(int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	vals := []agg.Value{agg.IntValue(1), agg.IntValue(1), agg.IntValue(1)}
	fill := func() {
		for _, k := range keys {
			if err := c.add(k, vals); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.drain(batch); err != nil {
			t.Fatal(err)
		}
		batch.Reset()
	}
	fill() // grow the slices
	c.drain(batch)
	i := 0
	allocs := testing.AllocsPerRun(n-1, func() {
		if err := c.add(keys[i], vals); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("add of a new key allocates %.2f times, want 0", allocs)
	}
}

func benchLikeSchema() aggmerge.Schema {
	i64 := agg.Type{Kind: agg.KindInt64}
	return aggmerge.Schema{
		Key:     []aggmerge.Column{{Name: "k", Type: i64}},
		Values:  []aggmerge.Column{{Name: "total", Type: i64, Func: "sum"}, {Name: "n", Type: i64, Func: "count"}, {Name: "top", Type: i64, Func: "max"}},
		Buckets: 8,
	}
}
