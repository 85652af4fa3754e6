package agg

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is the family of a column type.
type Kind uint8

// The column kinds. The numbers are stored in tables: never renumber.
const (
	KindInvalid   Kind = 0
	KindBool      Kind = 1
	KindInt64     Kind = 2
	KindFloat64   Kind = 3
	KindDecimal   Kind = 4 // fixed precision and scale
	KindString    Kind = 5
	KindBytes     Kind = 6
	KindTimestamp Kind = 7 // microseconds since the Unix epoch, UTC
	KindStringSet Kind = 8 // a set of strings, kept sorted and unique
)

// MaxDecimalPrecision bounds the digits of a decimal column.
const MaxDecimalPrecision = 76

var kindNames = [...]string{
	KindInvalid:   "invalid",
	KindBool:      "bool",
	KindInt64:     "int64",
	KindFloat64:   "float64",
	KindDecimal:   "decimal",
	KindString:    "string",
	KindBytes:     "bytes",
	KindTimestamp: "timestamp",
	KindStringSet: "set<string>",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Type is a column type. Precision and Scale are set for decimals only.
type Type struct {
	Kind      Kind
	Precision uint8
	Scale     uint8
}

// Types without parameters, for convenience.
var (
	Bool      = Type{Kind: KindBool}
	Int64     = Type{Kind: KindInt64}
	Float64   = Type{Kind: KindFloat64}
	String    = Type{Kind: KindString}
	Bytes     = Type{Kind: KindBytes}
	Timestamp = Type{Kind: KindTimestamp}
	StringSet = Type{Kind: KindStringSet}
)

// Decimal returns the type decimal(precision, scale).
func Decimal(precision, scale uint8) Type {
	return Type{Kind: KindDecimal, Precision: precision, Scale: scale}
}

// String gives the name ParseType reads back, e.g. "decimal(18,2)".
func (t Type) String() string {
	if t.Kind == KindDecimal {
		return fmt.Sprintf("decimal(%d,%d)", t.Precision, t.Scale)
	}
	return t.Kind.String()
}

// Validate reports whether t is a usable column type.
func (t Type) Validate() error {
	switch t.Kind {
	case KindBool, KindInt64, KindFloat64, KindString, KindBytes, KindTimestamp, KindStringSet:
		if t.Precision != 0 || t.Scale != 0 {
			return fmt.Errorf("agg: type %s takes no precision or scale", t.Kind)
		}
		return nil
	case KindDecimal:
		if t.Precision < 1 || t.Precision > MaxDecimalPrecision {
			return fmt.Errorf("agg: decimal precision %d not in [1, %d]", t.Precision, MaxDecimalPrecision)
		}
		if t.Scale > t.Precision {
			return fmt.Errorf("agg: decimal scale %d exceeds precision %d", t.Scale, t.Precision)
		}
		return nil
	}
	return fmt.Errorf("agg: unknown type kind %d", t.Kind)
}

// ParseType reads a type name: bool, int64, float64, decimal(p,s), string,
// bytes, timestamp, set<string>. Names are case-insensitive; bigint, double,
// boolean and varchar are accepted as aliases.
func ParseType(s string) (Type, error) {
	n := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), " ", ""))
	switch n {
	case "bool", "boolean":
		return Bool, nil
	case "int64", "bigint", "long":
		return Int64, nil
	case "float64", "double":
		return Float64, nil
	case "string", "varchar", "text":
		return String, nil
	case "bytes", "binary", "varbinary":
		return Bytes, nil
	case "timestamp":
		return Timestamp, nil
	case "set<string>":
		return StringSet, nil
	}
	if rest, ok := strings.CutPrefix(n, "decimal("); ok {
		ps, ok := strings.CutSuffix(rest, ")")
		p, sc, ok2 := strings.Cut(ps, ",")
		if ok && ok2 {
			pi, err1 := strconv.ParseUint(p, 10, 8)
			si, err2 := strconv.ParseUint(sc, 10, 8)
			if err1 == nil && err2 == nil {
				t := Decimal(uint8(pi), uint8(si))
				return t, t.Validate()
			}
		}
	}
	return Type{}, fmt.Errorf("agg: unknown type %q", s)
}

// MarshalText writes the type's name.
func (t Type) MarshalText() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return []byte(t.String()), nil
}

// UnmarshalText reads a type name (see ParseType).
func (t *Type) UnmarshalText(b []byte) error {
	p, err := ParseType(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}
