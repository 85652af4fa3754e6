package agg

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/axiomhq/hyperloglog"
)

// TestAccumulatorLargeSketches adds thousands of one-item and some
// many-item sketches, across roaring's container changes and hll's switch
// from sparse to dense registers: the value must be the sketch of the whole
// set, byte for byte.
func TestAccumulatorLargeSketches(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	for _, n := range []int{100, 5000, 40_000} {
		var (
			ids32 []uint32
			ids64 []uint64
			items [][]byte
		)
		a32 := mustNew(t, "rbm32", Bytes, nil).NewAccumulator()
		a64 := mustNew(t, "rbm64", Bytes, nil).NewAccumulator()
		ah := mustNew(t, "hll", Bytes, nil).NewAccumulator()
		add := func(a *Accumulator, v Value) {
			t.Helper()
			if err := a.Add(v); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < n; i++ {
			id := uint32(r.IntN(3 * n))
			if i%100 == 99 { // now and then a run of ids in one input
				run := make([]uint32, 50)
				for j := range run {
					run[j] = id + uint32(j)
				}
				ids32 = append(ids32, run...)
				add(&a32, Bitmap32Value(run...))
			} else {
				ids32 = append(ids32, id)
				add(&a32, Bitmap32Value(id))
			}
			id64 := uint64(id) << (i % 40)
			ids64 = append(ids64, id64)
			add(&a64, Bitmap64Value(id64))
			item := fmt.Appendf(nil, "user-%d", id)
			items = append(items, item)
			add(&ah, HLLValue(item))
			if i%1000 == 999 {
				add(&ah, HLLValue(items[i-999:]...))
			}
		}
		for _, c := range []struct {
			name string
			a    *Accumulator
			want Value
		}{
			{"rbm32", &a32, Bitmap32Value(ids32...)},
			{"rbm64", &a64, Bitmap64Value(ids64...)},
			{"hll", &ah, HLLValue(items...)},
		} {
			got, err := c.a.Value()
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(c.want) {
				t.Errorf("%s of %d inputs: %d bytes, want the %d of the whole set", c.name, n, len(got.Str()), len(c.want.Str()))
			}
		}
	}
}

// TestAccumulatorCorruptInput: a corrupt sketch is refused when added, and
// leaves the accumulator as it was.
func TestAccumulatorCorruptInput(t *testing.T) {
	inputs := map[string][2]Value{
		"rbm32": {Bitmap32Value(1), Bitmap32Value(2, 3)},
		"rbm64": {Bitmap64Value(1), Bitmap64Value(2, 3)},
		"hll":   {HLLValue([]byte("a")), HLLValue([]byte("b"))},
	}
	for name, in := range inputs {
		f := mustNew(t, name, Bytes, nil)
		want, err := f.Combine(in[0], in[1])
		if err != nil {
			t.Fatal(err)
		}
		bad := BytesValue([]byte(in[1].Str()[:len(in[1].Str())-1]))
		for added := 1; added <= 2; added++ { // before and after the sketch is decoded
			a := f.NewAccumulator()
			for _, v := range in[:added] {
				if err := a.Add(v); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Add(bad); !errors.Is(err, ErrCorruptInput) {
				t.Errorf("%s after %d inputs: adding corrupt bytes: %v, want ErrCorruptInput", name, added, err)
			}
			for _, v := range in[added:] {
				if err := a.Add(v); err != nil {
					t.Fatal(err)
				}
			}
			got, err := a.Value()
			if err != nil {
				t.Fatal(err)
			}
			if got, err = f.Merge(Value{}, got); err != nil || !got.Equal(want) {
				t.Errorf("%s after %d inputs and a refused one: %v, %v, want %v", name, added, got, err, want)
			}
		}
	}
}

// TestAccumulatorNoAllocs: for the functions kept by value the accumulator
// adds no allocation to Combine's.
func TestAccumulatorNoAllocs(t *testing.T) {
	for _, name := range []string{"sum", "count", "max"} {
		f := mustNew(t, name, Int64, nil)
		p := f.Partial(IntValue(3))
		allocs := testing.AllocsPerRun(100, func() {
			a := f.NewAccumulator()
			for range 10 {
				if err := a.Add(p); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := a.Value(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per accumulator of 10 inputs, want 0", name, allocs)
		}
	}
}

// TestOneIDSketches: a one-id bitmap is written and read without roaring,
// byte for byte as roaring writes it; the item of a one-item hll is read
// back as a hash that encodes to the same sketch.
func TestOneIDSketches(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 3))
	for i := range 2000 {
		id := r.Uint64() >> r.IntN(64)
		if i < 4 {
			id = []uint64{0, 1<<16 - 1, 1 << 16, 1<<64 - 1}[i]
		}
		want, err := rbm64.encode(roaring64.BitmapOf(id))
		if err != nil {
			t.Fatal(err)
		}
		if got := Bitmap64Value(id); got.Str() != string(want) {
			t.Fatalf("Bitmap64Value(%d) = %x, roaring writes %x", id, got.Str(), want)
		}
		if got, ok := oneID64(string(want)); !ok || got != id {
			t.Fatalf("oneID64 of {%d} = %d, %v", id, got, ok)
		}
		want, err = rbm32.encode(roaring.BitmapOf(uint32(id)))
		if err != nil {
			t.Fatal(err)
		}
		if got := Bitmap32Value(uint32(id)); got.Str() != string(want) {
			t.Fatalf("Bitmap32Value(%d) = %x, roaring writes %x", uint32(id), got.Str(), want)
		}
		if got, ok := oneID32(string(want)); !ok || got != uint32(id) {
			t.Fatalf("oneID32 of {%d} = %d, %v", uint32(id), got, ok)
		}
	}
	for i := range 20_000 { // enough items to draw keys of both kinds
		v := HLLValue(fmt.Append(nil, i))
		x, ok := oneHLLHash(v.Str())
		if !ok {
			t.Fatalf("oneHLLHash refuses the sketch of item %d: %x", i, v.Str())
		}
		sk := hyperloglog.New14()
		sk.InsertHash(x)
		if b, err := encodeHLL(sk); err != nil || string(b) != v.Str() {
			t.Fatalf("item %d: the hash read back gives %x, %v, want %x", i, b, err, v.Str())
		}
	}
	if _, ok := oneHLLHash(HLLValue([]byte("a"), []byte("b")).Str()); ok {
		t.Error("oneHLLHash reads one item in a sketch of two")
	}
	for _, v := range []Value{Bitmap32Value(), Bitmap32Value(1, 2), Bitmap64Value(1, 2), Bitmap64Value(1, 1<<40)} {
		if _, ok := oneID32(v.Str()); ok {
			t.Errorf("oneID32 reads one id in %x", v.Str())
		}
		if _, ok := oneID64(v.Str()); ok {
			t.Errorf("oneID64 reads one id in %x", v.Str())
		}
	}
}
