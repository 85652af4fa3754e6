package pipelines

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

// AggValue converts the value of a field of type t, as a Row holds it, to a
// table value of the same type (nil is a written null).
func AggValue(t agg.Type, v any) (agg.Value, error) {
	if v == nil {
		return agg.NullValue(), nil
	}
	var out agg.Value
	ok := false
	switch t.Kind {
	case agg.KindString:
		var s string
		if s, ok = v.(string); ok {
			out = agg.StringValue(s)
		}
	case agg.KindInt64:
		var i int64
		if i, ok = v.(int64); ok {
			out = agg.IntValue(i)
		}
	case agg.KindFloat64:
		var f float64
		if f, ok = v.(float64); ok {
			out = agg.FloatValue(f)
		}
	case agg.KindBool:
		var b bool
		if b, ok = v.(bool); ok {
			out = agg.BoolValue(b)
		}
	case agg.KindDecimal:
		var d decimal.Decimal
		if d, ok = v.(decimal.Decimal); ok {
			out = agg.DecimalValue(d)
		}
	case agg.KindTimestamp:
		var ts time.Time
		if ts, ok = v.(time.Time); ok {
			out = agg.TimestampValue(ts)
		}
	case agg.KindBytes:
		var b []byte
		if b, ok = v.([]byte); ok {
			out = agg.BytesValue(b)
		}
	}
	if !ok {
		return agg.Value{}, fmt.Errorf("%w: value %v (%T) in a %s field", ErrEval, v, v, t)
	}
	return agg.Conform(t, out)
}

// Value returns what column c folds for row r: for a count, 1 (or null
// when its field is null); for collect_set and the sketches, a set or
// sketch of the one value; else the field's value in the column's type.
func (c *TableColumn) Value(r Row) (agg.Value, error) {
	if c.Input == nil {
		return agg.IntValue(1), nil
	}
	in := c.Input
	v := r[in.Slot]
	if v == nil {
		return agg.NullValue(), nil
	}
	switch c.Func {
	case "count":
		return agg.IntValue(1), nil
	case "collect_set":
		return agg.SetValue(v.(string)), nil
	case "rbm32", "rbm64", "hll":
		return sketchOf(c.Func, v)
	}
	if in.Type != c.Type { // a widening the validator allowed
		switch x := v.(type) {
		case int64:
			if c.Type.Kind == agg.KindFloat64 {
				return agg.FloatValue(float64(x)), nil
			}
			v = decimal.NewFromInt(x)
		}
	}
	out, err := AggValue(c.Type, v)
	if err != nil {
		return agg.Value{}, fmt.Errorf("column %s: %w", c.Name, err)
	}
	return out, nil
}

// sketchOf returns the one-element sketch of v, or v itself when it is a
// serialized sketch (bytes).
func sketchOf(fn string, v any) (agg.Value, error) {
	switch x := v.(type) {
	case []byte:
		return agg.BytesValue(x), nil
	case string:
		return agg.HLLValue([]byte(x)), nil
	case int64:
		switch {
		case fn == "hll":
			return agg.HLLValue(binary.BigEndian.AppendUint64(nil, uint64(x))), nil
		case fn == "rbm32" && x >= 0 && x <= math.MaxUint32:
			return agg.Bitmap32Value(uint32(x)), nil
		case fn == "rbm64" && x >= 0:
			return agg.Bitmap64Value(uint64(x)), nil
		}
		return agg.Value{}, fmt.Errorf("%w: id %d out of the range of %s", ErrEval, x, fn)
	}
	return agg.Value{}, fmt.Errorf("%w: value %v (%T) for %s", ErrEval, v, v, fn)
}
