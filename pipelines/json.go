package pipelines

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
	"github.com/valyala/fastjson"
)

// ErrDecode classifies a record that does not match the source's schema:
// the source's on_error policy decides what happens to it.
var ErrDecode = errors.New("pipelines: record does not match the schema")

// RowBuilder makes the rows of a pipeline from decoded Kafka records. It is
// immutable and safe to share.
type RowBuilder struct {
	fields []SchemaField
	width  int
}

// NewRowBuilder returns the row builder of p's input schema.
func (p *Pipeline) NewRowBuilder() *RowBuilder {
	return &RowBuilder{fields: p.Input.Fields, width: p.Width}
}

// field returns the position of the field called key, trying first at
// hint: producers usually write the members of every record in one order.
func (b *RowBuilder) field(key []byte, hint int) int {
	if hint < len(b.fields) && b.fields[hint].Name == string(key) {
		return hint
	}
	for i := range b.fields {
		if b.fields[i].Name == string(key) {
			return i
		}
	}
	return -1
}

// FromJSON builds a row from a JSON object (format json). A member that is
// missing or null is a null field; members not in the schema are ignored.
// By field type a member must be: string, a string; int64, an integer;
// float64, a number; bool, true or false; decimal, a number or a string,
// within the precision; timestamp, an RFC 3339 string or a number of Unix
// milliseconds; bytes, a base64 string.
func (b *RowBuilder) FromJSON(v *fastjson.Value) (Row, error) {
	o, err := v.Object()
	if err != nil {
		return nil, fmt.Errorf("%w: want a JSON object, got %s", ErrDecode, v.Type())
	}
	r := make(Row, b.width)
	next := 0
	o.Visit(func(key []byte, m *fastjson.Value) {
		i := b.field(key, next)
		if i < 0 || err != nil || m.Type() == fastjson.TypeNull {
			return
		}
		next = i + 1
		f := b.fields[i]
		var x any
		if x, err = jsonValue(f.Type, m); err != nil {
			err = fmt.Errorf("%w: field %s: %v", ErrDecode, f.Name, err)
			return
		}
		r[f.Slot] = x
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func jsonValue(t agg.Type, m *fastjson.Value) (any, error) {
	switch t.Kind {
	case agg.KindString:
		s, err := m.StringBytes()
		return string(s), err
	case agg.KindInt64:
		return m.Int64()
	case agg.KindFloat64:
		return m.Float64()
	case agg.KindBool:
		return m.Bool()
	case agg.KindDecimal:
		text := m.MarshalTo(nil)
		if m.Type() == fastjson.TypeString {
			s, _ := m.StringBytes()
			text = s
		} else if m.Type() != fastjson.TypeNumber {
			return nil, fmt.Errorf("value doesn't contain number or string; it contains %s", m.Type())
		}
		d, err := decimal.NewFromString(string(text))
		if err != nil {
			return nil, err
		}
		if _, err := agg.Conform(t, agg.DecimalValue(d)); err != nil {
			return nil, err
		}
		return d, nil
	case agg.KindTimestamp:
		if m.Type() == fastjson.TypeNumber {
			ms, err := m.Int64()
			return time.UnixMilli(ms).UTC(), err
		}
		s, err := m.StringBytes()
		if err != nil {
			return nil, err
		}
		return time.Parse(time.RFC3339Nano, string(s))
	case agg.KindBytes:
		s, err := m.StringBytes()
		if err != nil {
			return nil, err
		}
		return base64.StdEncoding.DecodeString(string(s))
	}
	return nil, fmt.Errorf("type %s cannot come from JSON", t)
}

// FromRaw builds a row from a record's key and value (format raw): the
// fields key and value get them as string or bytes, as the schema says. A
// string must be valid UTF-8 (as in format json): bytes take anything.
func (b *RowBuilder) FromRaw(key, value []byte) (Row, error) {
	r := make(Row, b.width)
	for _, f := range b.fields {
		v := value
		if f.Name == "key" {
			v = key
		}
		switch {
		case v == nil:
		case f.Type.Kind == agg.KindString:
			if !utf8.Valid(v) {
				return nil, fmt.Errorf("%w: field %s: not valid UTF-8 (a bytes field takes any bytes)", ErrDecode, f.Name)
			}
			r[f.Slot] = string(v)
		default:
			r[f.Slot] = append([]byte(nil), v...)
		}
	}
	return r, nil
}

// AppendJSON appends r's input fields as a JSON object that FromJSON reads
// back to the same values (a datagen source producing into a topic writes
// this). Nulls are written as null.
func (b *RowBuilder) AppendJSON(dst []byte, r Row) []byte {
	dst = append(dst, '{')
	for i, f := range b.fields {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, f.Name)
		dst = append(dst, ':')
		switch v := r[f.Slot].(type) {
		case nil:
			dst = append(dst, "null"...)
		case string:
			dst = appendJSONString(dst, v)
		case int64:
			dst = strconv.AppendInt(dst, v, 10)
		case float64:
			dst = strconv.AppendFloat(dst, v, 'g', -1, 64)
		case bool:
			dst = strconv.AppendBool(dst, v)
		case decimal.Decimal:
			dst = append(dst, v.String()...)
		case time.Time:
			dst = appendJSONString(dst, v.UTC().Format(time.RFC3339Nano))
		case []byte:
			dst = appendJSONString(dst, base64.StdEncoding.EncodeToString(v))
		default:
			panic(fmt.Sprintf("pipelines: %T in a row", v)) // Row's invariant
		}
	}
	return append(dst, '}')
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', byte(c))
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = utf8.AppendRune(dst, c)
		}
	}
	return append(dst, '"')
}
