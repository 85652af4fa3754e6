package encoding

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

// Version is the format version written first in every key, row and chunk.
const Version byte = 1

// ErrCorrupt marks bytes that do not decode.
var ErrCorrupt = errors.New("encoding: corrupt")

func corrupt(what string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(what, args...))
}

// AppendKey appends the encoding of a primary key to dst. The values must
// match types, be present and be conformed (see agg.Conform).
func AppendKey(dst []byte, types []agg.Type, key []agg.Value) ([]byte, error) {
	if len(key) > len(types) {
		return nil, fmt.Errorf("encoding: key has %d values for %d columns", len(key), len(types))
	}
	dst = append(dst, Version)
	for i, v := range key {
		if v.IsNull() {
			return nil, fmt.Errorf("encoding: key column %d is null", i)
		}
		if v.Kind() != types[i].Kind {
			return nil, fmt.Errorf("encoding: key column %d: %s value for %s", i, v.Kind(), types[i])
		}
		switch types[i].Kind {
		case agg.KindBool:
			dst = append(dst, boolByte(v.Bool()))
		case agg.KindInt64:
			dst = binary.BigEndian.AppendUint64(dst, uint64(v.Int())^(1<<63))
		case agg.KindTimestamp:
			dst = binary.BigEndian.AppendUint64(dst, uint64(v.Micros())^(1<<63))
		case agg.KindFloat64:
			dst = binary.BigEndian.AppendUint64(dst, sortableFloat(v.Float()))
		case agg.KindDecimal:
			dst = appendBigInt(dst, v.Decimal().Coefficient())
		case agg.KindString, agg.KindBytes:
			dst = appendString(dst, v.Str())
		default:
			return nil, fmt.Errorf("encoding: key column %d: type %s cannot be a key", i, types[i])
		}
	}
	return dst, nil
}

// DecodeKey decodes a full primary key of the given types into dst (reused
// when it has the capacity) and returns it.
func DecodeKey(b []byte, types []agg.Type, dst []agg.Value) ([]agg.Value, error) {
	d := decoder{b: b}
	if v := d.byte(); v != Version {
		return nil, corrupt("key version %d", v)
	}
	out := slices.Grow(dst[:0], len(types))[:len(types)]
	for i, t := range types {
		switch t.Kind {
		case agg.KindBool:
			out[i] = agg.BoolValue(d.bool())
		case agg.KindInt64:
			out[i] = agg.IntValue(int64(d.u64() ^ (1 << 63)))
		case agg.KindTimestamp:
			out[i] = agg.MicrosValue(int64(d.u64() ^ (1 << 63)))
		case agg.KindFloat64:
			out[i] = agg.FloatValue(unsortableFloat(d.u64()))
		case agg.KindDecimal:
			out[i] = agg.DecimalValue(decimal.NewFromBigInt(d.bigInt(), -int32(t.Scale)))
		case agg.KindString:
			out[i] = agg.StringValue(d.string())
		case agg.KindBytes:
			out[i] = agg.BytesValue([]byte(d.string()))
		default:
			return nil, corrupt("key type %s", t)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing key bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func sortableFloat(f float64) uint64 {
	u := math.Float64bits(f)
	if u>>63 == 1 {
		return ^u
	}
	return u | 1<<63
}

func unsortableFloat(u uint64) float64 {
	if u>>63 == 1 {
		return math.Float64frombits(u &^ (1 << 63))
	}
	return math.Float64frombits(^u)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBigInt(dst []byte, c *big.Int) []byte {
	if c.Sign() < 0 {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
	}
	mag := c.Bytes()
	dst = binary.AppendUvarint(dst, uint64(len(mag)))
	return append(dst, mag...)
}

// decoder reads from b and remembers the first error; reads after an error
// return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string, args ...any) {
	if d.err == nil {
		d.err = corrupt(what, args...)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad bool")
	return false
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.fail("truncated")
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns the next length-prefixed bytes, aliasing the input.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("length %d beyond %d bytes", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) bigInt() *big.Int {
	sign := d.byte()
	mag := d.bytes()
	if d.err != nil {
		return new(big.Int)
	}
	if sign > 1 || (len(mag) > 0 && mag[0] == 0) {
		d.fail("bad big integer")
		return new(big.Int)
	}
	c := new(big.Int).SetBytes(mag)
	if sign == 0 {
		if c.Sign() == 0 {
			d.fail("negative zero")
		}
		c.Neg(c)
	}
	return c
}
