package state

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// Codec turns values of T into bytes and back. Append must not keep dst;
// Decode must not keep src (backends reuse their buffers) and returns an
// error wrapping ErrCorrupt for bytes it cannot read, never a panic.
//
// The built-in integer, float, bool and string codecs preserve order: the
// bytes of a < b compare lower, so backend scans over such keys are ordered.
type Codec[T any] interface {
	Append(dst []byte, v T) []byte
	Decode(src []byte) (T, error)
}

// CodecFor returns the built-in codec for T (string, []byte, int, int64,
// int32, uint64, float64, bool) and the JSON codec for any other type,
// including named types such as `type UserID string`.
func CodecFor[T any]() Codec[T] {
	var c any
	switch any(*new(T)).(type) {
	case string:
		c = StringCodec{}
	case []byte:
		c = BytesCodec{}
	case int64:
		c = Int64Codec{}
	case int:
		c = IntCodec{}
	case int32:
		c = Int32Codec{}
	case uint64:
		c = Uint64Codec{}
	case float64:
		c = Float64Codec{}
	case bool:
		c = BoolCodec{}
	default:
		return JSONCodec[T]{}
	}
	return c.(Codec[T])
}

func corrupt(what string, src []byte) error {
	return fmt.Errorf("decode %s from %d bytes: %w", what, len(src), ErrCorrupt)
}

// StringCodec stores the raw bytes of a string.
type StringCodec struct{}

func (StringCodec) Append(dst []byte, v string) []byte { return append(dst, v...) }
func (StringCodec) Decode(src []byte) (string, error)  { return string(src), nil }

// BytesCodec stores a byte slice as is; Decode returns a copy.
type BytesCodec struct{}

func (BytesCodec) Append(dst []byte, v []byte) []byte { return append(dst, v...) }
func (BytesCodec) Decode(src []byte) ([]byte, error) {
	return append([]byte{}, src...), nil
}

// Uint64Codec stores 8 bytes big-endian.
type Uint64Codec struct{}

func (Uint64Codec) Append(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }
func (Uint64Codec) Decode(src []byte) (uint64, error) {
	if len(src) != 8 {
		return 0, corrupt("uint64", src)
	}
	return binary.BigEndian.Uint64(src), nil
}

// Int64Codec stores 8 bytes big-endian with the sign bit flipped, so that
// negative numbers sort before positive ones.
type Int64Codec struct{}

func (Int64Codec) Append(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}
func (Int64Codec) Decode(src []byte) (int64, error) {
	u, err := Uint64Codec{}.Decode(src)
	if err != nil {
		return 0, corrupt("int64", src)
	}
	return int64(u ^ (1 << 63)), nil
}

// IntCodec stores an int as an Int64Codec does.
type IntCodec struct{}

func (IntCodec) Append(dst []byte, v int) []byte { return Int64Codec{}.Append(dst, int64(v)) }
func (IntCodec) Decode(src []byte) (int, error) {
	v, err := Int64Codec{}.Decode(src)
	if err == nil && int64(int(v)) != v {
		return 0, corrupt("int", src)
	}
	return int(v), err
}

// Int32Codec stores 4 bytes big-endian with the sign bit flipped.
type Int32Codec struct{}

func (Int32Codec) Append(dst []byte, v int32) []byte {
	return binary.BigEndian.AppendUint32(dst, uint32(v)^(1<<31))
}
func (Int32Codec) Decode(src []byte) (int32, error) {
	if len(src) != 4 {
		return 0, corrupt("int32", src)
	}
	return int32(binary.BigEndian.Uint32(src) ^ (1 << 31)), nil
}

// Float64Codec stores the IEEE bits big-endian, transformed so that byte
// order matches numeric order (sign bit flipped for positive numbers, all
// bits flipped for negative ones).
type Float64Codec struct{}

func (Float64Codec) Append(dst []byte, v float64) []byte {
	u := math.Float64bits(v)
	if u&(1<<63) != 0 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(dst, u)
}
func (Float64Codec) Decode(src []byte) (float64, error) {
	if len(src) != 8 {
		return 0, corrupt("float64", src)
	}
	u := binary.BigEndian.Uint64(src)
	if u&(1<<63) != 0 {
		u &^= 1 << 63
	} else {
		u = ^u
	}
	return math.Float64frombits(u), nil
}

// BoolCodec stores one byte, 0 or 1.
type BoolCodec struct{}

func (BoolCodec) Append(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}
func (BoolCodec) Decode(src []byte) (bool, error) {
	if len(src) != 1 || src[0] > 1 {
		return false, corrupt("bool", src)
	}
	return src[0] == 1, nil
}

// JSONCodec stores T as JSON (encoding/json). It is the fallback for structs;
// it allocates, so hot state should use a built-in or hand-written codec. Its
// byte order does not follow the order of values.
type JSONCodec[T any] struct{}

func (JSONCodec[T]) Append(dst []byte, v T) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only unsupported types (channels, funcs, cyclic values) fail: a
		// state declared with one is a programming error.
		panic(fmt.Sprintf("state: encode %T as JSON: %v", v, err))
	}
	return append(dst, b...)
}
func (JSONCodec[T]) Decode(src []byte) (T, error) {
	var v T
	if err := json.Unmarshal(src, &v); err != nil {
		return v, fmt.Errorf("decode %T from JSON: %w: %v", v, ErrCorrupt, err)
	}
	return v, nil
}
