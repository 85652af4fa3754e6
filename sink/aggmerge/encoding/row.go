package encoding

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

// Row state bytes.
const (
	stateAbsent     = 0
	stateNull       = 1
	statePresent    = 2
	stateBigDecimal = 3
)

// AppendRow appends the encoding of the value columns of a row to dst. The
// values must match types and be conformed (see agg.Conform).
func AppendRow(dst []byte, types []agg.Type, vals []agg.Value) []byte {
	dst = append(dst, Version)
	for i, v := range vals {
		switch v.State() {
		case agg.Absent:
			dst = append(dst, stateAbsent)
			continue
		case agg.Null:
			dst = append(dst, stateNull)
			continue
		}
		switch types[i].Kind {
		case agg.KindBool:
			dst = append(dst, statePresent, boolByte(v.Bool()))
		case agg.KindInt64, agg.KindTimestamp:
			dst = binary.AppendVarint(append(dst, statePresent), v.Int())
		case agg.KindFloat64:
			dst = binary.LittleEndian.AppendUint64(append(dst, statePresent), math.Float64bits(v.Float()))
		case agg.KindDecimal:
			c := v.Decimal().Coefficient()
			if c.IsInt64() {
				dst = binary.AppendVarint(append(dst, statePresent), c.Int64())
			} else {
				dst = appendBigInt(append(dst, stateBigDecimal), c)
			}
		case agg.KindString, agg.KindBytes:
			dst = appendString(append(dst, statePresent), v.Str())
		case agg.KindStringSet:
			set := v.Set()
			dst = binary.AppendUvarint(append(dst, statePresent), uint64(len(set)))
			for _, e := range set {
				dst = appendString(dst, e)
			}
		default:
			panic(fmt.Sprintf("encoding: row column %d has type %s", i, types[i])) // schema validation forbids it
		}
	}
	return dst
}

// DecodeRow decodes a row of the given types into dst (reused when it has
// the capacity) and returns it.
func DecodeRow(b []byte, types []agg.Type, dst []agg.Value) ([]agg.Value, error) {
	d := decoder{b: b}
	if v := d.byte(); v != Version {
		return nil, corrupt("row version %d", v)
	}
	dst = slices.Grow(dst[:0], len(types))[:len(types)]
	for i, t := range types {
		dst[i] = d.value(t)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing row bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return dst, nil
}

func (d *decoder) value(t agg.Type) agg.Value {
	st := d.byte()
	switch {
	case st == stateAbsent:
		return agg.Value{}
	case st == stateNull:
		return agg.NullValue()
	case st == stateBigDecimal && t.Kind == agg.KindDecimal:
		c := d.bigInt()
		if c.IsInt64() {
			d.fail("big decimal fits int64")
		}
		return agg.DecimalValue(decimal.NewFromBigInt(c, -int32(t.Scale)))
	case st != statePresent:
		d.fail("bad state %d", st)
		return agg.Value{}
	}
	switch t.Kind {
	case agg.KindBool:
		return agg.BoolValue(d.bool())
	case agg.KindInt64:
		return agg.IntValue(d.varint())
	case agg.KindTimestamp:
		return agg.MicrosValue(d.varint())
	case agg.KindFloat64:
		if len(d.b) < 8 {
			d.fail("truncated")
			return agg.Value{}
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
		d.b = d.b[8:]
		return agg.FloatValue(f)
	case agg.KindDecimal:
		return agg.DecimalValue(decimal.New(d.varint(), -int32(t.Scale)))
	case agg.KindString:
		return agg.StringValue(d.string())
	case agg.KindBytes:
		return agg.BytesValue(d.bytes())
	case agg.KindStringSet:
		n := d.uvarint()
		if n > uint64(len(d.b)) { // every element takes at least one byte
			d.fail("set of %d elements in %d bytes", n, len(d.b))
			return agg.Value{}
		}
		set := make([]string, n)
		for i := range set {
			set[i] = d.string()
			if i > 0 && set[i] <= set[i-1] && d.err == nil {
				d.fail("set not sorted and unique")
			}
		}
		return agg.SetValue(set...)
	}
	d.fail("row type %s", t)
	return agg.Value{}
}
