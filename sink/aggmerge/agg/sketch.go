package agg

import (
	"encoding/binary"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/axiomhq/hyperloglog"
)

// The sketch functions (rbm32, rbm64, hll) keep a serialized sketch in a
// bytes column and merge by union. Inputs are serialized sketches too, built
// with Bitmap32Value, Bitmap64Value or HLLValue; an empty bytes value is an
// empty sketch. Every result is re-serialized, so a corrupt input is an
// ErrCorruptInput error when it is merged, never stored.

// sketch is the part of a sketch library the union functions need.
type sketch[S any] struct {
	name   string
	decode func(b []byte) (S, error)
	union  func(acc, in S) error
	encode func(S) ([]byte, error)
	// addOne, when set, adds the item of b to acc if b is the serialization
	// of a one-item sketch, the common input, without decoding a sketch; it
	// reports false, leaving acc alone, for any other b.
	addOne func(acc S, b string) bool
}

func (k sketch[S]) merge(acc, in Value) (Value, error) {
	if in.IsNull() {
		return acc, nil
	}
	b, err := k.decodeAs(in, "input")
	if err != nil {
		return Value{}, err
	}
	if !acc.IsNull() {
		a, err := k.decodeAs(acc, "accumulator")
		if err != nil {
			return Value{}, err
		}
		if err := k.unionInto(a, b); err != nil {
			return Value{}, err
		}
		b = a
	}
	return k.value(b)
}

func (k sketch[S]) decodeAs(v Value, what string) (S, error) {
	s, err := k.decode([]byte(v.s))
	if err != nil {
		return s, fmt.Errorf("%w: %s %s: %v", ErrCorruptInput, k.name, what, err)
	}
	return s, nil
}

func (k sketch[S]) unionInto(acc, in S) error {
	if err := k.union(acc, in); err != nil {
		return fmt.Errorf("%w: %s union: %v", ErrCorruptInput, k.name, err)
	}
	return nil
}

func (k sketch[S]) value(s S) (Value, error) {
	out, err := k.encode(s)
	if err != nil {
		return Value{}, fmt.Errorf("%s encode: %w", k.name, err)
	}
	return BytesValue(out), nil
}

// start is the Accumulator's in-memory form of a sketch: first decoded.
func (k sketch[S]) start(first Value) (working, error) {
	s, err := k.decodeAs(first, "input")
	if err != nil {
		return nil, err
	}
	return &sketchWork[S]{k: k, s: s}, nil
}

type sketchWork[S any] struct {
	k sketch[S]
	s S
}

func (w *sketchWork[S]) add(p Value) error {
	if p.IsNull() || w.k.addOne != nil && w.k.addOne(w.s, p.s) {
		return nil
	}
	in, err := w.k.decodeAs(p, "input")
	if err != nil {
		return err
	}
	return w.k.unionInto(w.s, in)
}

func (w *sketchWork[S]) value() (Value, error) { return w.k.value(w.s) }

// guard turns a panic of a decoder fed corrupt bytes into an error.
func guard[S any](decode func([]byte) (S, error)) func([]byte) (S, error) {
	return func(b []byte) (s S, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("decode panicked: %v", r)
			}
		}()
		return decode(b)
	}
}

var rbm32 = sketch[*roaring.Bitmap]{
	name: "rbm32",
	decode: guard(func(b []byte) (*roaring.Bitmap, error) {
		bm := roaring.New()
		if len(b) == 0 {
			return bm, nil
		}
		if err := bm.UnmarshalBinary(b); err != nil {
			return nil, err
		}
		return bm, bm.Validate()
	}),
	union: func(a, b *roaring.Bitmap) error { a.Or(b); return nil },
	encode: func(bm *roaring.Bitmap) ([]byte, error) {
		bm.RunOptimize()
		return bm.ToBytes()
	},
	addOne: func(bm *roaring.Bitmap, b string) bool {
		id, ok := oneID32(b)
		if ok {
			bm.Add(id)
		}
		return ok
	},
}

var rbm64 = sketch[*roaring64.Bitmap]{
	name: "rbm64",
	decode: guard(func(b []byte) (*roaring64.Bitmap, error) {
		bm := roaring64.New()
		if len(b) == 0 {
			return bm, nil
		}
		if err := bm.UnmarshalBinary(b); err != nil {
			return nil, err
		}
		return bm, bm.Validate()
	}),
	union: func(a, b *roaring64.Bitmap) error { a.Or(b); return nil },
	encode: func(bm *roaring64.Bitmap) ([]byte, error) {
		bm.RunOptimize()
		return bm.ToBytes()
	},
	addOne: func(bm *roaring64.Bitmap, b string) bool {
		id, ok := oneID64(b)
		if ok {
			bm.Add(id)
		}
		return ok
	},
}

// oneID32 returns the id of b when b is the portable serialization of a
// one-id roaring bitmap as roaring writes it: no run containers (cookie
// 12346), one container, of cardinality 1, at offset 16. Any 18 bytes with
// these fields are exactly that, so nothing else is accepted.
func oneID32(b string) (uint32, bool) {
	if len(b) != 18 || le32(b[0:]) != 12346 || le32(b[4:]) != 1 || le16(b[10:]) != 0 || le32(b[12:]) != 16 {
		return 0, false
	}
	return uint32(le16(b[8:]))<<16 | uint32(le16(b[16:])), true
}

// oneID64 returns the id of b when b is the serialization of a one-id 64-bit
// roaring bitmap: one 32-bit bitmap (count 1 as uint64, its high 32 bits as
// uint32) holding one id.
func oneID64(b string) (uint64, bool) {
	if len(b) != 30 || le32(b[0:]) != 1 || le32(b[4:]) != 0 {
		return 0, false
	}
	lo, ok := oneID32(b[12:])
	return uint64(le32(b[8:]))<<32 | uint64(lo), ok
}

// appendOneID32 appends the serialization of the one-id bitmap {id}, byte
// for byte as roaring writes it (the format oneID32 reads).
func appendOneID32(b []byte, id uint32) []byte {
	b = binary.LittleEndian.AppendUint32(b, 12346)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint16(b, uint16(id>>16))
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 16)
	return binary.LittleEndian.AppendUint16(b, uint16(id))
}

// The serialized sketches are strings (agg.Value's); the conversions to
// []byte below do not escape and allocate nothing.
func be32(b string) uint32 { return binary.BigEndian.Uint32([]byte(b[:4])) }
func le16(b string) uint16 { return binary.LittleEndian.Uint16([]byte(b[:2])) }
func le32(b string) uint32 { return binary.LittleEndian.Uint32([]byte(b[:4])) }

// hllPrecision is fixed so that every sketch of a column can be merged:
// 2^14 registers, a standard error of about 0.81%.
const hllPrecision = 14

var hll = sketch[*hyperloglog.Sketch]{
	name: "hll",
	decode: guard(func(b []byte) (*hyperloglog.Sketch, error) {
		sk := hyperloglog.New14()
		if len(b) == 0 {
			return sk, nil
		}
		if err := sk.UnmarshalBinary(b); err != nil {
			return nil, err
		}
		return sk, nil
	}),
	union:  func(a, b *hyperloglog.Sketch) error { return a.Merge(b) },
	encode: encodeHLL,
	addOne: func(sk *hyperloglog.Sketch, b string) bool {
		x, ok := oneHLLHash(b)
		if ok {
			sk.InsertHash(x)
		}
		return ok
	},
}

// oneHLLHash returns a hash that a sketch stores as the one item of b, when b
// is a sparse precision-14 sketch of one item as HLLValue writes it:
// version 2, an empty temporary set, and a sparse list of one key k (count,
// last = k, size, k as a uvarint). The library keeps the top 25 bits of a
// hash as k>>1 (k even), or, when their low 11 bits are zero, the top 25
// bits as k>>7 and the run of zeros after them as k>>1&63 (k odd); the hash
// built back here encodes to the same k. Anything else is refused.
func oneHLLHash(b string) (uint64, bool) {
	if len(b) < 21 || b[:8] != "\x02\x0e\x00\x01\x00\x00\x00\x00" || be32(b[8:]) != 1 || int(be32(b[16:])) != len(b)-20 {
		return 0, false
	}
	k := be32(b[12:])
	if v, n := binary.Uvarint([]byte(b[20:])); v != uint64(k) || n != len(b)-20 {
		return 0, false
	}
	const lowBits = 25 - hllPrecision // 11
	if k&1 == 0 {
		idx := uint64(k >> 1)
		if k>>26 != 0 || idx&(1<<lowBits-1) == 0 {
			return 0, false
		}
		return idx << 39, true
	}
	idx, zeros := uint64(k>>7), k>>1&63
	if idx&(1<<lowBits-1) != 0 || zeros < 1 || zeros > 40 {
		return 0, false
	}
	var rest uint64 // the bits below the top 25, with zeros-1 leading zeros
	if zeros < 40 {
		rest = 1 << (39 - zeros)
	}
	return idx<<39 | rest, true
}

// encodeHLL serializes a sketch canonically, so that equal sketches are
// equal bytes and an unchanged row is seen as unchanged. The library's own
// encoding depends on insertion order; Estimate sorts the sparse list, and a
// sparse list longer than the dense form (which only a set of more than 2^p
// hashes can produce in both) is replaced by the dense registers.
func encodeHLL(sk *hyperloglog.Sketch) ([]byte, error) {
	sk.Estimate()
	b, err := sk.MarshalBinary()
	if err != nil || len(b) <= 1<<hllPrecision {
		return b, err
	}
	dense := hyperloglog.NewNoSparse()
	if err := dense.Merge(sk); err != nil {
		return nil, err
	}
	return dense.MarshalBinary()
}

func buildRBM32(Type, map[string]string) (mergeFn, mergeFn, error) { return rbm32.merge, nil, nil }
func buildRBM64(Type, map[string]string) (mergeFn, mergeFn, error) { return rbm64.merge, nil, nil }
func buildHLL(Type, map[string]string) (mergeFn, mergeFn, error)   { return hll.merge, nil, nil }

// Bitmap32Value returns a serialized 32-bit roaring bitmap of ids, the input
// of an rbm32 column.
func Bitmap32Value(ids ...uint32) Value {
	if len(ids) == 1 { // the common input, without building a bitmap
		var buf [18]byte
		return BytesValue(appendOneID32(buf[:0], ids[0]))
	}
	b, err := rbm32.encode(roaring.BitmapOf(ids...))
	if err != nil {
		panic(fmt.Sprintf("agg: serialize rbm32: %v", err)) // writes to memory cannot fail
	}
	return BytesValue(b)
}

// Bitmap64Value returns a serialized 64-bit roaring bitmap of ids, the input
// of an rbm64 column.
func Bitmap64Value(ids ...uint64) Value {
	if len(ids) == 1 {
		var buf [30]byte
		b := binary.LittleEndian.AppendUint64(buf[:0], 1)
		b = binary.LittleEndian.AppendUint32(b, uint32(ids[0]>>32))
		return BytesValue(appendOneID32(b, uint32(ids[0])))
	}
	b, err := rbm64.encode(roaring64.BitmapOf(ids...))
	if err != nil {
		panic(fmt.Sprintf("agg: serialize rbm64: %v", err))
	}
	return BytesValue(b)
}

// HLLValue returns a serialized HyperLogLog sketch of items, the input of an
// hll column.
func HLLValue(items ...[]byte) Value {
	sk := hyperloglog.New14()
	for _, it := range items {
		sk.Insert(it)
	}
	b, err := hll.encode(sk)
	if err != nil {
		panic(fmt.Sprintf("agg: serialize hll: %v", err))
	}
	return BytesValue(b)
}

// Bitmap32 decodes an rbm32 column value; a null reads as an empty bitmap.
func Bitmap32(v Value) (*roaring.Bitmap, error) { return rbm32.decode([]byte(v.s)) }

// Bitmap64 decodes an rbm64 column value; a null reads as an empty bitmap.
func Bitmap64(v Value) (*roaring64.Bitmap, error) { return rbm64.decode([]byte(v.s)) }

// HLLEstimate returns the approximate number of distinct items in an hll
// column value; a null reads as zero.
func HLLEstimate(v Value) (uint64, error) {
	sk, err := hll.decode([]byte(v.s))
	if err != nil {
		return 0, fmt.Errorf("%w: hll: %v", ErrCorruptInput, err)
	}
	return sk.Estimate(), nil
}
