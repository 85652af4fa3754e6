package agg

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

func dec(s string) Value { return DecimalValue(decimal.RequireFromString(s)) }

var absent = Value{}

// step is one function application and its exact expected outcome.
type step struct {
	acc, in Value
	want    Value
	err     error // expected error class; want is ignored then
}

func runSteps(t *testing.T, f *Func, op string, steps []step) {
	t.Helper()
	for i, s := range steps {
		var got Value
		var err error
		if op == "merge" {
			got, err = f.Merge(s.acc, s.in)
		} else {
			got, err = f.Retract(s.acc, s.in)
		}
		if s.err != nil {
			if !errors.Is(err, s.err) {
				t.Errorf("%s %s step %d: %s(%v, %v) error %v, want %v", f.Name(), f.Type(), i, op, s.acc, s.in, err, s.err)
			}
			continue
		}
		if err != nil || !got.Equal(s.want) {
			t.Errorf("%s %s step %d: %s(%v, %v) = %v, %v; want %v", f.Name(), f.Type(), i, op, s.acc, s.in, got, err, s.want)
		}
	}
}

func mustNew(t *testing.T, name string, typ Type, params map[string]string) *Func {
	t.Helper()
	f, err := New(name, typ, params)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSemantics(t *testing.T) {
	d2 := Decimal(10, 2)
	tests := []struct {
		name    string
		typ     Type
		params  map[string]string
		merge   []step
		retract []step
	}{
		{name: "sum", typ: Int64,
			merge: []step{
				{acc: absent, in: IntValue(5), want: IntValue(5)},
				{acc: IntValue(5), in: IntValue(-7), want: IntValue(-2)},
				{acc: IntValue(5), in: NullValue(), want: IntValue(5)},
				{acc: absent, in: NullValue(), want: absent},
				{acc: NullValue(), in: IntValue(3), want: IntValue(3)},
				{acc: IntValue(math.MaxInt64), in: IntValue(1), err: ErrOverflow},
				{acc: IntValue(math.MinInt64), in: IntValue(-1), err: ErrOverflow},
				{acc: IntValue(math.MaxInt64), in: IntValue(math.MinInt64), want: IntValue(-1)},
			},
			retract: []step{
				{acc: IntValue(5), in: IntValue(3), want: IntValue(2)},
				{acc: IntValue(5), in: NullValue(), want: IntValue(5)},
				{acc: absent, in: IntValue(3), want: IntValue(-3)},
				{acc: IntValue(math.MinInt64), in: IntValue(1), err: ErrOverflow},
				{acc: IntValue(0), in: IntValue(math.MinInt64), err: ErrOverflow},
				{acc: IntValue(-1), in: IntValue(math.MinInt64), want: IntValue(math.MaxInt64)},
			}},
		{name: "sum", typ: Float64,
			merge: []step{
				{acc: FloatValue(1.5), in: FloatValue(2.25), want: FloatValue(3.75)},
				{acc: FloatValue(math.MaxFloat64), in: FloatValue(math.MaxFloat64), err: ErrOverflow},
			}},
		{name: "sum", typ: d2,
			merge: []step{
				{acc: dec("0.10"), in: dec("0.20"), want: dec("0.30")},
				{acc: dec("99999999.99"), in: dec("0.01"), err: ErrOverflow},
			},
			retract: []step{{acc: dec("0.30"), in: dec("0.10"), want: dec("0.20")}}},
		{name: "product", typ: Int64,
			merge: []step{
				{acc: absent, in: IntValue(3), want: IntValue(3)},
				{acc: IntValue(3), in: IntValue(-4), want: IntValue(-12)},
				{acc: IntValue(3), in: NullValue(), want: IntValue(3)},
				{acc: IntValue(1 << 62), in: IntValue(4), err: ErrOverflow},
				{acc: IntValue(-1), in: IntValue(math.MinInt64), err: ErrOverflow},
			},
			retract: []step{
				{acc: IntValue(-12), in: IntValue(-4), want: IntValue(3)},
				{acc: IntValue(12), in: IntValue(0), err: ErrCannotRetract},
				{acc: IntValue(12), in: IntValue(5), err: ErrCannotRetract},
				{acc: IntValue(12), in: NullValue(), want: IntValue(12)},
			}},
		{name: "product", typ: d2,
			merge: []step{
				{acc: dec("1.50"), in: dec("2.00"), want: dec("3.00")},
				{acc: dec("0.05"), in: dec("0.50"), want: dec("0.02")}, // 0.025 rounds half to even
			},
			retract: []step{
				{acc: dec("3.00"), in: dec("2.00"), want: dec("1.50")},
				{acc: dec("1.00"), in: dec("3.00"), err: ErrCannotRetract},
			}},
		{name: "count", typ: Int64,
			merge: []step{
				{acc: absent, in: IntValue(42), want: IntValue(1)},
				{acc: IntValue(1), in: IntValue(-9), want: IntValue(2)},
				{acc: IntValue(2), in: NullValue(), want: IntValue(2)},
				{acc: absent, in: NullValue(), want: absent},
				{acc: IntValue(math.MaxInt64), in: IntValue(1), err: ErrOverflow},
			},
			retract: []step{
				{acc: IntValue(2), in: IntValue(7), want: IntValue(1)},
				{acc: IntValue(2), in: NullValue(), want: IntValue(2)},
				{acc: absent, in: IntValue(7), want: IntValue(-1)},
			}},
		{name: "max", typ: Int64,
			merge: []step{
				{acc: absent, in: IntValue(3), want: IntValue(3)},
				{acc: IntValue(3), in: IntValue(2), want: IntValue(3)},
				{acc: IntValue(3), in: IntValue(9), want: IntValue(9)},
				{acc: IntValue(3), in: NullValue(), want: IntValue(3)},
			},
			retract: []step{{acc: IntValue(3), in: IntValue(3), err: ErrCannotRetract}}},
		{name: "min", typ: String,
			merge: []step{
				{acc: StringValue("b"), in: StringValue("a"), want: StringValue("a")},
				{acc: StringValue("b"), in: StringValue(""), want: StringValue("")},
				{acc: StringValue("b"), in: NullValue(), want: StringValue("b")},
			}},
		{name: "max", typ: d2,
			merge: []step{{acc: dec("1.10"), in: dec("1.09"), want: dec("1.10")}}},
		{name: "min", typ: Timestamp,
			merge: []step{{acc: MicrosValue(10), in: MicrosValue(-5), want: MicrosValue(-5)}}},
		{name: "last_value", typ: String,
			merge: []step{
				{acc: StringValue("a"), in: StringValue("b"), want: StringValue("b")},
				{acc: StringValue("a"), in: NullValue(), want: NullValue()},
				{acc: absent, in: NullValue(), want: NullValue()},
				{acc: StringValue("a"), in: StringValue(""), want: StringValue("")},
			},
			retract: []step{
				{acc: StringValue("b"), in: StringValue("b"), want: absent},
				{acc: StringValue("b"), in: StringValue("a"), want: StringValue("b")},
				{acc: NullValue(), in: NullValue(), want: absent},
				{acc: StringValue("b"), in: NullValue(), want: StringValue("b")},
			}},
		{name: "last_value_ignore_nulls", typ: Int64,
			merge: []step{
				{acc: IntValue(1), in: NullValue(), want: IntValue(1)},
				{acc: IntValue(1), in: IntValue(2), want: IntValue(2)},
				{acc: absent, in: NullValue(), want: absent},
			},
			retract: []step{
				{acc: IntValue(2), in: IntValue(2), want: absent},
				{acc: IntValue(2), in: NullValue(), want: IntValue(2)},
			}},
		{name: "first_value", typ: Int64,
			merge: []step{
				{acc: absent, in: IntValue(1), want: IntValue(1)},
				{acc: IntValue(1), in: IntValue(2), want: IntValue(1)},
				{acc: absent, in: NullValue(), want: NullValue()}, // a null first value is kept
				{acc: NullValue(), in: IntValue(2), want: NullValue()},
			},
			retract: []step{{acc: IntValue(1), in: IntValue(1), err: ErrCannotRetract}}},
		{name: "first_value_ignore_nulls", typ: Int64,
			merge: []step{
				{acc: absent, in: NullValue(), want: absent},
				{acc: NullValue(), in: IntValue(2), want: IntValue(2)},
				{acc: IntValue(2), in: IntValue(3), want: IntValue(2)},
			}},
		{name: "listagg", typ: String,
			merge: []step{
				{acc: absent, in: StringValue("a"), want: StringValue("a")},
				{acc: StringValue("a"), in: StringValue("b"), want: StringValue("a,b")},
				{acc: StringValue("a"), in: NullValue(), want: StringValue("a")},
				{acc: StringValue("a"), in: StringValue(""), want: StringValue("a,")},
				{acc: absent, in: StringValue(""), want: StringValue("")},
			}},
		{name: "listagg", typ: String, params: map[string]string{"delimiter": " | "},
			merge: []step{{acc: StringValue("a"), in: StringValue("b"), want: StringValue("a | b")}}},
		{name: "bool_and", typ: Bool,
			merge: []step{
				{acc: BoolValue(true), in: BoolValue(false), want: BoolValue(false)},
				{acc: BoolValue(true), in: NullValue(), want: BoolValue(true)},
				{acc: absent, in: BoolValue(true), want: BoolValue(true)},
			}},
		{name: "bool_or", typ: Bool,
			merge: []step{
				{acc: BoolValue(false), in: BoolValue(true), want: BoolValue(true)},
				{acc: BoolValue(false), in: BoolValue(false), want: BoolValue(false)},
				{acc: absent, in: NullValue(), want: absent},
			}},
		{name: "collect_set", typ: StringSet,
			merge: []step{
				{acc: absent, in: SetValue("b", "a", "b"), want: SetValue("a", "b")},
				{acc: SetValue("a", "b"), in: SetValue("c", "a"), want: SetValue("a", "b", "c")},
				{acc: SetValue("a"), in: NullValue(), want: SetValue("a")},
				{acc: SetValue("a"), in: SetValue(""), want: SetValue("", "a")},
				{acc: absent, in: SetValue(), want: SetValue()},
			}},
		{name: "rbm32", typ: Bytes,
			merge: []step{
				{acc: absent, in: Bitmap32Value(1, 5), want: Bitmap32Value(1, 5)},
				{acc: Bitmap32Value(1, 5), in: Bitmap32Value(5, 7, 1<<31), want: Bitmap32Value(1, 5, 7, 1<<31)},
				{acc: Bitmap32Value(1), in: NullValue(), want: Bitmap32Value(1)},
				{acc: Bitmap32Value(1), in: BytesValue(nil), want: Bitmap32Value(1)},
				{acc: Bitmap32Value(1), in: BytesValue([]byte("not a bitmap")), err: ErrCorruptInput},
			}},
		{name: "rbm64", typ: Bytes,
			merge: []step{
				{acc: Bitmap64Value(1 << 40), in: Bitmap64Value(2), want: Bitmap64Value(2, 1<<40)},
				{acc: Bitmap64Value(1), in: BytesValue([]byte{1, 2, 3}), err: ErrCorruptInput},
			}},
		{name: "hll", typ: Bytes,
			merge: []step{
				{acc: HLLValue([]byte("a")), in: HLLValue([]byte("b")), want: HLLValue([]byte("a"), []byte("b"))},
				{acc: HLLValue([]byte("a")), in: NullValue(), want: HLLValue([]byte("a"))},
				{acc: HLLValue([]byte("a")), in: BytesValue([]byte{9, 9, 9}), err: ErrCorruptInput},
			}},
	}
	for _, tc := range tests {
		f := mustNew(t, tc.name, tc.typ, tc.params)
		runSteps(t, f, "merge", tc.merge)
		if tc.retract != nil {
			runSteps(t, f, "retract", tc.retract)
		}
	}
}

func TestTypesChecked(t *testing.T) {
	bad := []struct {
		name string
		typ  Type
	}{
		{"sum", String}, {"product", Bool}, {"count", Float64}, {"max", Bool}, {"max", Bytes},
		{"listagg", Int64}, {"bool_and", Int64}, {"bool_or", String}, {"collect_set", String},
		{"rbm32", Int64}, {"rbm64", String}, {"hll", Int64}, {"min", StringSet},
	}
	for _, b := range bad {
		if _, err := New(b.name, b.typ, nil); !errors.Is(err, ErrType) {
			t.Errorf("New(%s, %s) = %v, want ErrType", b.name, b.typ, err)
		}
	}
	if _, err := New("median", Int64, nil); !errors.Is(err, ErrUnknownFunc) {
		t.Errorf("unknown function: %v", err)
	}
	if _, err := New("listagg", String, map[string]string{"delimiter": ""}); err == nil {
		t.Error("empty listagg delimiter accepted")
	}
	if _, err := New("sum", Int64, map[string]string{"delimiter": ","}); err == nil || !strings.Contains(err.Error(), "delimiter") {
		t.Errorf("unknown parameter: %v", err)
	}
	if _, err := New("sum", Decimal(3, 5), nil); err == nil {
		t.Error("decimal scale above precision accepted")
	}
}

// New's refusals of a type or a parameter are typed, so that a caller can
// place them (pipelines points at the params of a column) without reading
// the text, and their texts stay what they were.
func TestNewErrorsAreTyped(t *testing.T) {
	_, err := New("sum", String, nil)
	var te *TypeError
	if !errors.As(err, &te) || !errors.Is(err, ErrType) || te.Func != "sum" || te.Type != String {
		t.Fatalf("New(sum, string) = %#v, want a *TypeError wrapping ErrType", err)
	}
	if want := "agg: type mismatch: sum does not accept string (accepts int64, float64, decimal)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	for _, c := range []struct {
		fn     string
		params map[string]string
		want   ParamError
		text   string
	}{
		{"sum", map[string]string{"delimiter": ","}, ParamError{Func: "sum", Param: "delimiter"}, `agg: function sum has no parameter "delimiter"`},
		{"listagg", map[string]string{"delimiter": ""}, ParamError{Func: "listagg", Param: "delimiter", Problem: "must not be empty"},
			"agg: function listagg: parameter delimiter must not be empty"},
	} {
		_, err := New(c.fn, String, c.params)
		if c.fn == "sum" {
			_, err = New(c.fn, Int64, c.params)
		}
		var pe *ParamError
		if !errors.As(err, &pe) || *pe != c.want {
			t.Errorf("New(%s, %v) = %#v, want %#v", c.fn, c.params, err, c.want)
			continue
		}
		if err.Error() != c.text || pe.Reason() != strings.TrimPrefix(c.text, "agg: ") {
			t.Errorf("error %q (reason %q), want %q", err, pe.Reason(), c.text)
		}
	}
}

func TestAliases(t *testing.T) {
	for alias, name := range map[string]string{
		"last_value_ignore_nulls":  "last_non_null_value",
		"First-Value-Ignore-Nulls": "first_non_null_value",
		"STRING_AGG":               "listagg",
		"sum":                      "sum",
	} {
		typ := Int64
		if name == "listagg" {
			typ = String
		}
		if f := mustNew(t, alias, typ, nil); f.Name() != name {
			t.Errorf("%s resolves to %s, want %s", alias, f.Name(), name)
		}
		if got := Normalize(alias); got != name {
			t.Errorf("Normalize(%s) = %s", alias, got)
		}
	}
}

func TestRetractRefused(t *testing.T) {
	can := map[string]bool{"sum": true, "product": true, "count": true, "last_value": true, "last_non_null_value": true}
	for _, d := range defs {
		typ := Type{Kind: d.kinds[0]}
		if typ.Kind == KindDecimal {
			typ = Decimal(10, 2)
		}
		f := mustNew(t, d.name, typ, nil)
		if f.CanRetract() != can[d.name] {
			t.Errorf("%s: CanRetract %v", d.name, f.CanRetract())
		}
		if !can[d.name] {
			if _, err := f.Retract(absent, NullValue()); !errors.Is(err, ErrCannotRetract) {
				t.Errorf("%s: Retract error %v", d.name, err)
			}
		}
	}
}

func TestConform(t *testing.T) {
	d := Decimal(5, 2)
	got, err := Conform(d, dec("1.5"))
	if err != nil || got.Decimal().Exponent() != -2 || !got.Equal(dec("1.50")) {
		t.Errorf("Conform 1.5 = %v (exp %d), %v", got, got.Decimal().Exponent(), err)
	}
	if _, err := Conform(d, dec("1.234")); !errors.Is(err, ErrType) {
		t.Errorf("1.234 into scale 2: %v", err)
	}
	if _, err := Conform(d, dec("1000.00")); !errors.Is(err, ErrOverflow) {
		t.Errorf("1000.00 into decimal(5,2): %v", err)
	}
	if _, err := Conform(Float64, FloatValue(math.NaN())); !errors.Is(err, ErrType) {
		t.Errorf("NaN: %v", err)
	}
	if _, err := Conform(Int64, StringValue("1")); !errors.Is(err, ErrType) {
		t.Errorf("string into int64: %v", err)
	}
	if v, err := Conform(Int64, NullValue()); err != nil || v.State() != Null {
		t.Errorf("null: %v %v", v, err)
	}
}

func TestParseType(t *testing.T) {
	for _, typ := range []Type{Bool, Int64, Float64, Decimal(18, 2), String, Bytes, Timestamp, StringSet} {
		got, err := ParseType(typ.String())
		if err != nil || got != typ {
			t.Errorf("ParseType(%q) = %v, %v", typ.String(), got, err)
		}
	}
	for _, s := range []string{"decimal(0,0)", "decimal(77,1)", "decimal(5)", "int", "decimal(x,y)"} {
		if _, err := ParseType(s); err == nil {
			t.Errorf("ParseType(%q) accepted", s)
		}
	}
}
