package state

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func roundTrip[T comparable](t *testing.T, c Codec[T], vs ...T) {
	t.Helper()
	for _, v := range vs {
		b := c.Append([]byte("prefix"), v)
		got, err := c.Decode(b[len("prefix"):])
		if err != nil || got != v {
			t.Errorf("%T: round trip of %v = %v, %v", c, v, got, err)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	roundTrip(t, CodecFor[string](), "", "a", "héllo\x00")
	roundTrip(t, CodecFor[int64](), 0, 1, -1, math.MinInt64, math.MaxInt64)
	roundTrip(t, CodecFor[int](), 0, -7, math.MaxInt)
	roundTrip(t, CodecFor[int32](), 0, -7, math.MinInt32, math.MaxInt32)
	roundTrip(t, CodecFor[uint64](), 0, math.MaxUint64)
	roundTrip(t, CodecFor[float64](), 0, -0.5, 1e300, math.Inf(-1), math.Inf(1))
	roundTrip(t, CodecFor[bool](), true, false)
	type point struct{ X, Y int }
	roundTrip(t, CodecFor[point](), point{1, 2}, point{})
	b, err := CodecFor[[]byte]().Decode(CodecFor[[]byte]().Append(nil, []byte{1, 2}))
	if err != nil || !bytes.Equal(b, []byte{1, 2}) {
		t.Errorf("bytes round trip = %v, %v", b, err)
	}
	if _, ok := CodecFor[point]().(JSONCodec[point]); !ok {
		t.Errorf("CodecFor[struct] is %T, want JSONCodec", CodecFor[point]())
	}
}

// TestCodecOrder checks that encoded bytes sort like the values.
func TestCodecOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ints := []int64{math.MinInt64, -1, 0, 1, math.MaxInt64}
	floats := []float64{math.Inf(-1), -1e10, -1, -1e-300, 0, 1e-300, 1, 1e10, math.Inf(1)}
	for range 200 {
		ints = append(ints, int64(r.Uint64()))
		floats = append(floats, r.NormFloat64()*1e6)
	}
	checkOrder(t, CodecFor[int64](), ints)
	checkOrder(t, CodecFor[float64](), floats)
	checkOrder(t, CodecFor[int32](), []int32{math.MinInt32, -5, 0, 5, math.MaxInt32})
	checkOrder(t, CodecFor[string](), []string{"", "a", "ab", "b"})
}

func checkOrder[T interface {
	~int32 | ~int64 | ~float64 | ~string
}](t *testing.T, c Codec[T], vs []T) {
	t.Helper()
	slices.Sort(vs)
	for i := 1; i < len(vs); i++ {
		a, b := c.Append(nil, vs[i-1]), c.Append(nil, vs[i])
		if vs[i-1] < vs[i] && bytes.Compare(a, b) >= 0 {
			t.Errorf("%T: %v < %v but %x >= %x", c, vs[i-1], vs[i], a, b)
		}
	}
}

func TestCodecCorrupt(t *testing.T) {
	inputs := [][]byte{nil, {1}, {1, 2, 3}, bytes.Repeat([]byte{0xff}, 9), []byte("{not json")}
	check := func(name string, decode func([]byte) error) {
		for _, in := range inputs {
			if err := decode(in); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s.Decode(%x) = %v, want ErrCorrupt", name, in, err)
			}
		}
	}
	mustFail := func(name string, decode func([]byte) error, in []byte) {
		if err := decode(in); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s.Decode(%x) = %v, want ErrCorrupt", name, in, err)
		}
	}
	dec := func(d func([]byte) error) func([]byte) error { return d }
	i64 := dec(func(b []byte) error { _, err := Int64Codec{}.Decode(b); return err })
	i32 := dec(func(b []byte) error { _, err := Int32Codec{}.Decode(b); return err })
	f64 := dec(func(b []byte) error { _, err := Float64Codec{}.Decode(b); return err })
	bl := dec(func(b []byte) error { _, err := BoolCodec{}.Decode(b); return err })
	js := dec(func(b []byte) error { _, err := JSONCodec[struct{ A int }]{}.Decode(b); return err })
	lst := dec(func(b []byte) error { _, err := listCodec[int64]{Int64Codec{}}.Decode(b); return err })
	for name, d := range map[string]func([]byte) error{"int64": i64, "int32": i32, "float64": f64, "bool": bl, "json": js, "list": lst} {
		check(name, d)
	}
	mustFail("int64", i64, []byte{1, 2, 3})
	mustFail("int32", i32, []byte{1, 2, 3})
	mustFail("float64", f64, nil)
	mustFail("bool", bl, []byte{2})
	mustFail("json", js, []byte("{not json"))
	mustFail("list", lst, []byte{5, 1})       // element longer than the input
	mustFail("list", lst, []byte{2, 1, 2})    // element of the wrong size
	mustFail("list", lst, []byte{0xff, 0xff}) // unterminated uvarint
}

func TestListCodecRoundTrip(t *testing.T) {
	c := listCodec[string]{StringCodec{}}
	for _, vs := range [][]string{nil, {""}, {"a", "", "bcd"}, {string(make([]byte, 300))}} {
		got, err := c.Decode(c.Append(nil, vs))
		if err != nil || !slices.Equal(got, vs) {
			t.Errorf("list round trip of %q = %q, %v", vs, got, err)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder: each must return a
// value or an error wrapping ErrCorrupt, never panic.
func FuzzDecode(f *testing.F) {
	for _, seed := range [][]byte{nil, {0}, {1, 2, 3, 4}, Int64Codec{}.Append(nil, -3), []byte(`{"A":1}`), {9, 1, 2}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		errs := []error{}
		collect := func(_ any, err error) { errs = append(errs, err) }
		collect(Int64Codec{}.Decode(b))
		collect(IntCodec{}.Decode(b))
		collect(Int32Codec{}.Decode(b))
		collect(Uint64Codec{}.Decode(b))
		collect(Float64Codec{}.Decode(b))
		collect(BoolCodec{}.Decode(b))
		collect(StringCodec{}.Decode(b))
		collect(JSONCodec[struct{ A int }]{}.Decode(b))
		collect(listCodec[string]{StringCodec{}}.Decode(b))
		collect(listCodec[int32]{Int32Codec{}}.Decode(b))
		_, _, _, err := ParseBackendKey(b)
		errs = append(errs, err)
		for i, err := range errs {
			if err != nil && !errors.Is(err, ErrCorrupt) {
				t.Errorf("decoder %d: %v does not wrap ErrCorrupt", i, err)
			}
		}
	})
}
