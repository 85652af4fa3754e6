package agg

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// State says whether a value holds something. A column that was never
// written is Absent; a written null is Null. Both read as null; the
// difference matters only to first_value, which keeps a null first value.
type State uint8

// The value states. The numbers are stored in tables: never renumber.
const (
	Absent  State = 0
	Null    State = 1
	Present State = 2
)

// Value is one typed cell. The zero Value is Absent. Values are immutable:
// functions return new values and never modify their arguments.
type Value struct {
	state State
	kind  Kind
	i     int64 // bool (0/1), int64, timestamp micros, float64 bits
	s     string
	d     decimal.Decimal
	set   []string // sorted, unique
}

// NullValue is a written null.
func NullValue() Value { return Value{state: Null} }

// BoolValue returns a bool.
func BoolValue(b bool) Value {
	v := Value{state: Present, kind: KindBool}
	if b {
		v.i = 1
	}
	return v
}

// IntValue returns an int64.
func IntValue(i int64) Value { return Value{state: Present, kind: KindInt64, i: i} }

// FloatValue returns a float64.
func FloatValue(f float64) Value {
	return Value{state: Present, kind: KindFloat64, i: int64(math.Float64bits(f))}
}

// DecimalValue returns a decimal; it is rescaled to the column's scale when
// written.
func DecimalValue(d decimal.Decimal) Value { return Value{state: Present, kind: KindDecimal, d: d} }

// StringValue returns a string.
func StringValue(s string) Value { return Value{state: Present, kind: KindString, s: s} }

// BytesValue returns a copy of b as a bytes value.
func BytesValue(b []byte) Value { return Value{state: Present, kind: KindBytes, s: string(b)} }

// TimestampValue returns t truncated to microseconds.
func TimestampValue(t time.Time) Value { return MicrosValue(t.UnixMicro()) }

// MicrosValue returns a timestamp of us microseconds since the Unix epoch.
func MicrosValue(us int64) Value { return Value{state: Present, kind: KindTimestamp, i: us} }

// SetValue returns the set of the given strings (duplicates dropped).
func SetValue(elems ...string) Value {
	s := slices.Clone(elems)
	slices.Sort(s)
	return Value{state: Present, kind: KindStringSet, set: slices.Compact(s)}
}

// State returns whether v is absent, null or present.
func (v Value) State() State { return v.state }

// IsNull reports whether v is absent or null.
func (v Value) IsNull() bool { return v.state != Present }

// Kind returns the kind of a present value, KindInvalid for a null.
func (v Value) Kind() Kind {
	if v.state != Present {
		return KindInvalid
	}
	return v.kind
}

// Bool returns the bool held by v.
func (v Value) Bool() bool { return v.i != 0 }

// Int returns the int64 held by v.
func (v Value) Int() int64 { return v.i }

// Float returns the float64 held by v.
func (v Value) Float() float64 { return math.Float64frombits(uint64(v.i)) }

// Decimal returns the decimal held by v.
func (v Value) Decimal() decimal.Decimal { return v.d }

// Str returns the string (or the bytes, as a string) held by v.
func (v Value) Str() string { return v.s }

// Bytes returns a copy of the bytes held by v.
func (v Value) Bytes() []byte { return []byte(v.s) }

// Micros returns the timestamp held by v in microseconds since the epoch.
func (v Value) Micros() int64 { return v.i }

// Time returns the timestamp held by v.
func (v Value) Time() time.Time { return time.UnixMicro(v.i).UTC() }

// Set returns the sorted elements of a set; the caller must not modify it.
func (v Value) Set() []string { return v.set }

// Equal reports whether a and b are the same value in the same state.
// Decimals are equal when numerically equal.
func (a Value) Equal(b Value) bool {
	if a.state != b.state {
		return false
	}
	if a.state != Present {
		return true
	}
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case KindDecimal:
		return a.d.Equal(b.d)
	case KindString, KindBytes:
		return a.s == b.s
	case KindStringSet:
		return slices.Equal(a.set, b.set)
	}
	return a.i == b.i
}

// compare orders two present values of the same orderable kind.
func compare(a, b Value) int {
	switch a.kind {
	case KindInt64, KindTimestamp, KindBool:
		return cmp.Compare(a.i, b.i)
	case KindFloat64:
		return cmp.Compare(a.Float(), b.Float())
	case KindDecimal:
		return a.d.Cmp(b.d)
	case KindString:
		return strings.Compare(a.s, b.s)
	case KindBytes:
		return bytes.Compare([]byte(a.s), []byte(b.s))
	}
	panic(fmt.Sprintf("agg: compare of %s", a.kind))
}

// String renders v for messages and tests.
func (v Value) String() string {
	switch v.state {
	case Absent:
		return "<absent>"
	case Null:
		return "null"
	}
	switch v.kind {
	case KindBool:
		return fmt.Sprint(v.Bool())
	case KindInt64:
		return fmt.Sprint(v.i)
	case KindFloat64:
		return fmt.Sprint(v.Float())
	case KindDecimal:
		return v.d.String()
	case KindString:
		return fmt.Sprintf("%q", v.s)
	case KindBytes:
		return fmt.Sprintf("0x%x", v.s)
	case KindTimestamp:
		return v.Time().Format(time.RFC3339Nano)
	case KindStringSet:
		return fmt.Sprintf("%q", v.set)
	}
	return "<invalid>"
}

// Conform checks that v may be stored in a column of type t and returns it
// in canonical form: decimals rescaled to the column's scale (never rounded)
// and checked against its precision. Floats must be finite.
func Conform(t Type, v Value) (Value, error) {
	if v.state != Present {
		return v, nil
	}
	if v.kind != t.Kind {
		return Value{}, fmt.Errorf("%w: %s value for a %s column", ErrType, v.kind, t)
	}
	switch t.Kind {
	case KindFloat64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return Value{}, fmt.Errorf("%w: float %v is not finite", ErrType, f)
		}
	case KindDecimal:
		return conformDecimal(t, v.d)
	}
	return v, nil
}

// conformDecimal rescales d to t's scale, refusing to drop digits.
func conformDecimal(t Type, d decimal.Decimal) (Value, error) {
	r := d.Round(int32(t.Scale))
	if !r.Equal(d) {
		return Value{}, fmt.Errorf("%w: decimal %s has more than %d fractional digits", ErrType, d, t.Scale)
	}
	if r.NumDigits() > int(t.Precision) {
		return Value{}, fmt.Errorf("%w: decimal %s exceeds %s", ErrOverflow, d, t)
	}
	return Value{state: Present, kind: KindDecimal, d: r}, nil
}
