package kafka

import (
	"math"
	"strconv"

	"github.com/ebbflow/ebbflow/internal/jsonenc"
)

// Row is a JSON object decoded without a schema: its fields in document
// order. Rows made by one source subtask share memory in chunks, so a row
// kept for long (in a heap cache, not in checkpointed state, which encodes
// it) should be Cloned to let the rest of its chunk go.
type Row struct{ fields []Field }

// Field is one member of an object (or, with an empty Name, one element of
// an array).
type Field struct {
	Name  string
	Value Value
}

// Kind is the JSON type of a Value; a number is an Int when its text has no
// fraction or exponent and fits an int64, else a Float.
type Kind uint8

// The kinds of Value.
const (
	Null Kind = iota
	Bool
	Int
	Float
	String
	Object
	Array
)

func (k Kind) String() string {
	return [...]string{"null", "bool", "int", "float", "string", "object", "array"}[k]
}

// Value is one JSON value.
type Value struct {
	kind Kind
	num  uint64  // bool (0/1), int64 or float64 bits
	str  string  // String
	kids []Field // Object members, Array elements
}

// NewRow returns a row of the given fields (copied).
func NewRow(fields ...Field) Row { return Row{fields: append([]Field(nil), fields...)} }

// RowOf returns a row over fields themselves, not a copy as NewRow makes:
// for a reader that hands out row after row in one reused slice, each row
// valid only until the slice changes.
func RowOf(fields []Field) Row { return Row{fields: fields} }

// Len is the number of fields.
func (r Row) Len() int { return len(r.fields) }

// Fields returns the fields in document order; the slice must not be
// modified.
func (r Row) Fields() []Field { return r.fields }

// Get returns the field called name (the last one, if duplicated).
func (r Row) Get(name string) (Value, bool) { return lookup(r.fields, name) }

// Path follows names through nested objects.
func (r Row) Path(names ...string) (Value, bool) {
	v := Value{kind: Object, kids: r.fields}
	for _, n := range names {
		var ok bool
		if v, ok = v.Get(n); !ok {
			return Value{}, false
		}
	}
	return v, true
}

// Map converts the row to plain Go values (map[string]any, []any, nil, bool,
// int64, float64, string), allocating.
func (r Row) Map() map[string]any { return Value{kind: Object, kids: r.fields}.Any().(map[string]any) }

// Clone returns a deep copy that shares no memory with other rows.
func (r Row) Clone() Row { return Row{fields: cloneFields(r.fields)} }

func cloneFields(fs []Field) []Field {
	if fs == nil {
		return nil
	}
	out := make([]Field, len(fs))
	for i, f := range fs {
		out[i] = Field{Name: string([]byte(f.Name)), Value: f.Value.clone()}
	}
	return out
}

func (v Value) clone() Value {
	v.str = string([]byte(v.str))
	v.kids = cloneFields(v.kids)
	return v
}

// lookup finds the last field called name: a duplicated name means what
// it means to encoding/json and JavaScript, the last one wins.
func lookup(fs []Field, name string) (Value, bool) {
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i].Name == name {
			return fs[i].Value, true
		}
	}
	return Value{}, false
}

// Value constructors, for tests and for operators that build rows.
func NullValue() Value              { return Value{} }
func BoolValue(b bool) Value        { return Value{kind: Bool, num: b2u(b)} }
func IntValue(i int64) Value        { return Value{kind: Int, num: uint64(i)} }
func FloatValue(f float64) Value    { return Value{kind: Float, num: math.Float64bits(f)} }
func StringValue(s string) Value    { return Value{kind: String, str: s} }
func ObjectValue(fs ...Field) Value { return Value{kind: Object, kids: append([]Field(nil), fs...)} }
func ArrayValue(vs ...Value) Value {
	kids := make([]Field, len(vs))
	for i, v := range vs {
		kids[i].Value = v
	}
	return Value{kind: Array, kids: kids}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func (v Value) Kind() Kind        { return v.kind }
func (v Value) IsNull() bool      { return v.kind == Null }
func (v Value) Len() int          { return len(v.kids) }
func (v Value) Index(i int) Value { return v.kids[i].Value }

// Int returns an Int value.
func (v Value) Int() (int64, bool) { return int64(v.num), v.kind == Int }

// Float returns a Float or Int value as a float64.
func (v Value) Float() (float64, bool) {
	switch v.kind {
	case Float:
		return math.Float64frombits(v.num), true
	case Int:
		return float64(int64(v.num)), true
	}
	return 0, false
}

// Str returns a String value.
func (v Value) Str() (string, bool) { return v.str, v.kind == String }

// Bool returns a Bool value.
func (v Value) Bool() (bool, bool) { return v.num == 1, v.kind == Bool }

// Get returns the member called name of an Object value (the last one, if
// duplicated).
func (v Value) Get(name string) (Value, bool) {
	if v.kind != Object {
		return Value{}, false
	}
	return lookup(v.kids, name)
}

// Fields returns the members of an Object value.
func (v Value) Fields() []Field {
	if v.kind != Object {
		return nil
	}
	return v.kids
}

// Row returns an Object value as a Row, sharing its members; ok is false
// for any other kind.
func (v Value) Row() (r Row, ok bool) {
	if v.kind != Object {
		return Row{}, false
	}
	return Row{fields: v.kids}, true
}

// Any converts v to plain Go values, allocating.
func (v Value) Any() any {
	switch v.kind {
	case Bool:
		return v.num == 1
	case Int:
		return int64(v.num)
	case Float:
		return math.Float64frombits(v.num)
	case String:
		return v.str
	case Object:
		m := make(map[string]any, len(v.kids))
		for _, f := range v.kids {
			m[f.Name] = f.Value.Any() // the last of duplicates wins
		}
		return m
	case Array:
		a := make([]any, len(v.kids))
		for i, f := range v.kids {
			a[i] = f.Value.Any()
		}
		return a
	}
	return nil
}

// AppendJSON appends v as JSON.
func (v Value) AppendJSON(dst []byte) []byte {
	switch v.kind {
	case Bool:
		return strconv.AppendBool(dst, v.num == 1)
	case Int:
		return strconv.AppendInt(dst, int64(v.num), 10)
	case Float:
		f := math.Float64frombits(v.num)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return append(dst, "null"...)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	case String:
		return jsonenc.AppendString(dst, v.str)
	case Object:
		return appendObject(dst, v.kids)
	case Array:
		dst = append(dst, '[')
		for i, f := range v.kids {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = f.Value.AppendJSON(dst)
		}
		return append(dst, ']')
	}
	return append(dst, "null"...)
}

func appendObject(dst []byte, fs []Field) []byte {
	dst = append(dst, '{')
	for i, f := range fs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonenc.AppendString(dst, f.Name)
		dst = append(dst, ':')
		dst = f.Value.AppendJSON(dst)
	}
	return append(dst, '}')
}

// MarshalJSON encodes the row as a JSON object.
func (r Row) MarshalJSON() ([]byte, error) { return appendObject(nil, r.fields), nil }

// UnmarshalJSON decodes a JSON object into r (with its own memory).
func (r *Row) UnmarshalJSON(b []byte) error {
	d := rowDecoder{oneShot: true}
	row, err := d.decode(b)
	if err != nil {
		return err
	}
	*r = row
	return nil
}

// String returns the row as JSON.
func (r Row) String() string { return string(appendObject(nil, r.fields)) }

// RowBuilder makes Rows from values the caller has, not from JSON, with
// the fields of many rows carved out of shared chunks as RowDecoder does
// (see Row). The zero value is ready; one goroutine uses it.
type RowBuilder struct{ d rowDecoder }

// Row returns a row of a copy of fields.
func (b *RowBuilder) Row(fields ...Field) Row {
	fs := b.d.take(len(fields))
	copy(fs, fields)
	return Row{fields: fs}
}

// Array returns an Array value of a copy of vs, as the decoder makes one
// (no elements: nil).
func (b *RowBuilder) Array(vs ...Value) Value {
	kids := b.d.take(len(vs))
	for i, v := range vs {
		kids[i].Value = v
	}
	return Value{kind: Array, kids: kids}
}

// NumberValue is the Value the row decoder makes of the JSON number text
// s: an Int when s has no fraction or exponent and fits an int64, else a
// Float. It keeps nothing of s.
func NumberValue(s string) (Value, error) {
	var v Value
	err := parseNumber(&v, s)
	return v, err
}
