package agg

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shopspring/decimal"
)

// gen draws a random present value of a type. Numbers stay small and
// integral so that float sums and decimal products are exact: the laws are
// about the functions, not about rounding.
func gen(r *rand.Rand, t Type) Value {
	switch t.Kind {
	case KindBool:
		return BoolValue(r.IntN(2) == 1)
	case KindInt64:
		return IntValue(int64(r.IntN(41) - 20))
	case KindFloat64:
		return FloatValue(float64(r.IntN(41) - 20))
	case KindDecimal:
		return DecimalValue(decimal.New(int64(r.IntN(41)-20), 0).Round(int32(t.Scale)))
	case KindString:
		return StringValue(string(rune('a' + r.IntN(4))))
	case KindTimestamp:
		return MicrosValue(int64(r.IntN(1000)))
	case KindStringSet:
		return SetValue(string(rune('a'+r.IntN(4))), string(rune('a'+r.IntN(4))))
	}
	return BytesValue([]byte{byte(r.IntN(4))})
}

// input draws an input: null one time in five.
func input(r *rand.Rand, f *Func) Value {
	if r.IntN(5) == 0 {
		return NullValue()
	}
	switch f.Name() {
	case "rbm32":
		if r.IntN(2) == 0 { // one id, the common input
			return Bitmap32Value(uint32(r.IntN(50)) << (16 * r.IntN(2)))
		}
		return Bitmap32Value(uint32(r.IntN(50)), uint32(r.IntN(50)))
	case "rbm64":
		if r.IntN(2) == 0 {
			return Bitmap64Value(uint64(r.IntN(50)) << (33 * r.IntN(2)))
		}
		return Bitmap64Value(uint64(r.IntN(50)), uint64(r.IntN(50))<<33)
	case "hll":
		return HLLValue([]byte(fmt.Sprint(r.IntN(50))))
	}
	return gen(r, f.Type())
}

// accumulator draws a stored value: absent, null or a merged input.
func accumulator(r *rand.Rand, f *Func) Value {
	switch r.IntN(5) {
	case 0:
		return Value{}
	case 1:
		return NullValue()
	}
	v, err := f.Merge(Value{}, input(r, f))
	if err != nil {
		panic(err)
	}
	return v
}

func lawFuncs(t *testing.T) []*Func {
	var fs []*Func
	for _, d := range defs {
		for _, k := range d.kinds {
			typ := Type{Kind: k}
			if k == KindDecimal {
				typ = Decimal(12, 2)
			}
			fs = append(fs, mustNew(t, d.name, typ, nil))
		}
	}
	return fs
}

// TestLaws checks, on random values, each law a function claims:
// associativity, commutativity of partials, idempotence (an input merged again, at once or after
// others, changes nothing), and retract∘merge = identity for a present
// accumulator. It also checks that a function that does not claim a law
// really breaks it somewhere, so the flags are not just conservative.
func TestLaws(t *testing.T) {
	seed := uint64(1)
	r := rand.New(rand.NewPCG(seed, 7))
	for _, f := range lawFuncs(t) {
		var broke struct{ assoc, idem, comm bool }
		for range 2000 {
			a, x, y := accumulator(r, f), input(r, f), input(r, f)
			// Commutativity of partials, as a session window merging two
			// sessions needs it: which came first does not matter.
			xy1, err1 := f.Combine(f.Partial(x), f.Partial(y))
			yx1, err2 := f.Combine(f.Partial(y), f.Partial(x))
			if err1 != nil || err2 != nil {
				t.Fatalf("%s %s: combine error %v %v", f.Name(), f.Type(), err1, err2)
			}
			if !xy1.Equal(yx1) {
				broke.comm = true
				if f.Commutative() {
					t.Errorf("%s %s (seed %d): not commutative: x=%v y=%v: %v vs %v", f.Name(), f.Type(), seed, x, y, xy1, yx1)
				}
			}
			ax, err1 := f.Merge(a, x)
			axy, err2 := f.Merge(ax, y)
			xy, err3 := f.Merge(x, y)
			a_xy, err4 := f.Merge(a, xy)
			if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
				t.Fatalf("%s %s: merge error %v %v %v %v", f.Name(), f.Type(), err1, err2, err3, err4)
			}
			if !axy.Equal(a_xy) {
				broke.assoc = true
				if f.Associative() {
					t.Errorf("%s %s (seed %d): not associative: a=%v x=%v y=%v: %v vs %v", f.Name(), f.Type(), seed, a, x, y, axy, a_xy)
				}
			}
			// Idempotence as replay needs it: x merged again, right away or
			// after y, changes nothing.
			axx, err1 := f.Merge(ax, x)
			axyx, err2 := f.Merge(axy, x)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if !axx.Equal(ax) || !axyx.Equal(axy) {
				broke.idem = true
				if f.Idempotent() {
					t.Errorf("%s %s (seed %d): not idempotent: a=%v x=%v y=%v: merge(a,x,x)=%v vs %v, merge(a,x,y,x)=%v vs %v",
						f.Name(), f.Type(), seed, a, x, y, axx, ax, axyx, axy)
				}
			}
			if f.CanRetract() && !a.IsNull() && f.Name() != "last_value" && f.Name() != "last_non_null_value" {
				if f.Name() == "product" && !x.IsNull() && x.Equal(unit(f.Type(), 0)) {
					continue // no inverse for a zero factor
				}
				back, err := f.Retract(ax, x)
				if err != nil || !back.Equal(a) {
					t.Errorf("%s %s (seed %d): retract(merge(%v, %v)) = %v, %v", f.Name(), f.Type(), seed, a, x, back, err)
				}
			}
		}
		if !f.Associative() && !broke.assoc {
			t.Errorf("%s %s: claims no associativity but never broke it", f.Name(), f.Type())
		}
		if !f.Commutative() && !broke.comm {
			t.Errorf("%s %s: claims no commutativity but never broke it", f.Name(), f.Type())
		}
		if !f.Idempotent() && !broke.idem {
			t.Errorf("%s %s: claims no idempotence but never broke it", f.Name(), f.Type())
		}
	}
}

// TestLastValueRetract pins what last_value* retraction means: the latest
// value is taken back out only if it is the one being retracted.
func TestLastValueRetract(t *testing.T) {
	for _, name := range []string{"last_value", "last_non_null_value"} {
		f := mustNew(t, name, Int64, nil)
		v, _ := f.Merge(IntValue(1), IntValue(2))
		if got, _ := f.Retract(v, IntValue(2)); !got.IsNull() {
			t.Errorf("%s: retracting the latest value left %v", name, got)
		}
		if got, _ := f.Retract(v, IntValue(1)); !got.Equal(IntValue(2)) {
			t.Errorf("%s: retracting an overwritten value gave %v", name, got)
		}
	}
}

func TestHLLErrorBound(t *testing.T) {
	for _, n := range []int{1000, 10_000, 200_000} {
		items := make([][]byte, n)
		for i := range items {
			items[i] = fmt.Appendf(nil, "user-%d", i)
		}
		f := mustNew(t, "hll", Bytes, nil)
		// Two overlapping halves merged: the overlap must not be counted twice.
		a, b := HLLValue(items[:n*2/3]...), HLLValue(items[n/3:]...)
		v, err := f.Merge(a, b)
		if err != nil {
			t.Fatal(err)
		}
		est, err := HLLEstimate(v)
		if err != nil {
			t.Fatal(err)
		}
		// Standard error 0.81% at precision 14; 3% is over three sigma.
		if rel := float64(int64(est)-int64(n)) / float64(n); rel > 0.03 || rel < -0.03 {
			t.Errorf("hll of %d distinct estimates %d (%.2f%%)", n, est, 100*rel)
		}
	}
}

func TestBitmapContents(t *testing.T) {
	f := mustNew(t, "rbm64", Bytes, nil)
	v, err := f.Merge(Bitmap64Value(1, 1<<40), Bitmap64Value(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	bm, err := Bitmap64(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := bm.ToArray(); fmt.Sprint(got) != fmt.Sprint([]uint64{1, 3, 1 << 40}) {
		t.Errorf("rbm64 union = %v", got)
	}
	bm32, err := Bitmap32(Value{})
	if err != nil || !bm32.IsEmpty() {
		t.Errorf("null rbm32 reads as %v, %v", bm32, err)
	}
}

// TestHLLCanonical merges large sketches in different orders, across the
// sparse-to-dense switch: equal sets must give equal bytes, or an unchanged
// row would be logged as changed.
func TestHLLCanonical(t *testing.T) {
	f := mustNew(t, "hll", Bytes, nil)
	for _, n := range []int{300, 3000, 8000, 30_000} {
		items := make([][]byte, n)
		for i := range items {
			items[i] = fmt.Appendf(nil, "item-%d", i)
		}
		a, b, c := HLLValue(items[:n/2]...), HLLValue(items[n/3:n*3/4]...), HLLValue(items[n/2:]...)
		merge := func(vs ...Value) Value {
			acc := Value{}
			for _, v := range vs {
				var err error
				if acc, err = f.Merge(acc, v); err != nil {
					t.Fatal(err)
				}
			}
			return acc
		}
		abc, cba := merge(a, b, c), merge(c, b, a)
		bac := merge(b, merge(a, c))
		if !abc.Equal(cba) || !abc.Equal(bac) {
			t.Errorf("n=%d: merge order changes the bytes (%d, %d, %d bytes)", n, len(abc.Str()), len(cba.Str()), len(bac.Str()))
		}
		if again := merge(abc, b); !again.Equal(abc) {
			t.Errorf("n=%d: merging a subset again changes the bytes", n)
		}
	}
}
