package pebblestate

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ebbflow/ebbflow/state"
)

// TestOrder compares order with a stable sort of the ops by key, on batches
// with short, empty, long and repeated keys.
func TestOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	var o orderer
	for round := range 200 {
		n := r.IntN(300)
		if round == 0 {
			n = 0
		}
		// Odd rounds: long keys behind a shared prefix, so that keys also
		// tie on their 8 abbreviated bytes.
		prefix, tail := []byte(nil), 5
		if round%2 == 1 {
			prefix, tail = []byte{0, byte(r.IntN(2)), 3, 's', 'u', 'm'}[:r.IntN(7)], 14
		}
		ops := make([]state.WriteOp, n)
		for i := range ops {
			key := append([]byte{}, prefix...)
			for range r.IntN(tail) {
				key = append(key, byte(r.IntN(3))) // few distinct bytes: many ties
			}
			ops[i] = state.WriteOp{Key: key, Value: []byte{byte(i), byte(i >> 8)}}
		}
		want := slices.Clone(ops)
		slices.SortStableFunc(want, func(x, y state.WriteOp) int { return bytes.Compare(x.Key, y.Key) })
		got := o.order(ops)
		if len(got) != n {
			t.Fatalf("round %d: %d indexes for %d ops", round, len(got), n)
		}
		for i, j := range got {
			if !bytes.Equal(ops[j].Key, want[i].Key) || !bytes.Equal(ops[j].Value, want[i].Value) {
				t.Fatalf("round %d: position %d holds op %d (key %x), want key %x value %x",
					round, i, j, ops[j].Key, want[i].Key, want[i].Value)
			}
		}
	}
}

// BenchmarkOrder orders the batch of a checkpoint with 50k dirty keys of one
// state, as a subtask of the keyed sum at parallelism 2 writes.
func BenchmarkOrder(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 5))
	ops := make([]state.WriteOp, 50_000)
	keys := r.Perm(100_000)
	for i := range ops {
		k := state.Uint64Codec{}.Append(nil, uint64(keys[i]))
		key := state.AppendBackendKey(nil, state.KeyGroupOf(k, state.DefaultMaxParallelism)/2, "sum", k)
		ops[i] = state.WriteOp{Key: key, Value: make([]byte, 24)}
	}
	var o orderer
	for b.Loop() {
		o.order(ops)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ops)), "ns/key")
}
