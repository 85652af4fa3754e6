package agg

import (
	"math/rand/v2"
	"testing"
)

// TestPartialLaw checks, for every function that can pre-aggregate, that
// merging inputs one by one equals merging their combined partial once,
// whether the partials are combined with Combine or in an Accumulator.
func TestPartialLaw(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 11))
	for _, f := range lawFuncs(t) {
		if !f.CanCombine() {
			t.Errorf("%s %s cannot pre-aggregate: every function should", f.Name(), f.Type())
			continue
		}
		for range 1000 {
			acc := accumulator(r, f)
			seq := acc
			var part Value
			accu := f.NewAccumulator()
			n := 1 + r.IntN(5)
			for i := 0; i < n; i++ {
				x := input(r, f)
				var err error
				if seq, err = f.Merge(seq, x); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					part = f.Partial(x)
				} else if part, err = f.Combine(part, f.Partial(x)); err != nil {
					t.Fatal(err)
				}
				if err := accu.Add(f.Partial(x)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := f.MergePartial(acc, part)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(seq) {
				t.Fatalf("%s %s: acc %v, %d inputs: one by one %v, pre-aggregated %v", f.Name(), f.Type(), acc, n, seq, got)
			}
			av, err := accu.Value()
			if err != nil {
				t.Fatal(err)
			}
			if got, err = f.MergePartial(acc, av); err != nil {
				t.Fatal(err)
			}
			if !got.Equal(seq) {
				t.Fatalf("%s %s: acc %v, %d inputs: one by one %v, in an accumulator %v", f.Name(), f.Type(), acc, n, seq, got)
			}
		}
	}
}
