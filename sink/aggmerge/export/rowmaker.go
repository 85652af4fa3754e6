package export

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/ebbflow/ebbflow/internal/jsonenc"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// rowMaker makes a table's rows as a reader of its changelog gets them
// (appendKey and appendRow, decoded by kafka.RowDecoder) straight from
// the values, without the JSON: the round trip was half of RowsAt's CPU.
// TestRowMakerMatchesJSON holds the two equal for every kind of value.
// The key and the row's fields are reused: each is valid until the next
// (the values they hold are not: they may be kept). One goroutine uses it.
type rowMaker struct {
	s      *aggmerge.Schema
	rows   kafka.RowBuilder // makes sets, out of chunks never written again
	fields []kafka.Field    // reused: the row being made
	keyBuf []byte           // reused: the key being made
	num    []byte           // reused: a float's text
	set    []kafka.Value    // reused: a set's elements
}

func newRowMaker(s *aggmerge.Schema) *rowMaker {
	return &rowMaker{s: s, fields: make([]kafka.Field, len(s.Key)+len(s.Values))}
}

// key returns the record key of a row: its primary key as appendKey writes
// it, valid until the next key.
func (m *rowMaker) key(key []agg.Value) string {
	m.keyBuf = appendKey(m.keyBuf[:0], m.s, key)
	return unsafe.String(unsafe.SliceData(m.keyBuf), len(m.keyBuf))
}

// row returns the row of key and vals as appendRow's JSON decodes, valid
// until the next row (its fields are reused).
func (m *rowMaker) row(key, vals []agg.Value) (kafka.Row, error) {
	for i, c := range m.s.Key {
		if err := m.value(&m.fields[i], c.Name, key[i]); err != nil {
			return kafka.Row{}, err
		}
	}
	for i, c := range m.s.Values {
		if err := m.value(&m.fields[len(m.s.Key)+i], c.Name, vals[i]); err != nil {
			return kafka.Row{}, err
		}
	}
	return kafka.RowOf(m.fields), nil
}

// value sets f to the column name and v as agg.AppendJSON's JSON decodes.
func (m *rowMaker) value(f *kafka.Field, name string, v agg.Value) error {
	f.Name = name
	if v.IsNull() {
		f.Value = kafka.NullValue()
		return nil
	}
	switch v.Kind() {
	case agg.KindBool:
		f.Value = kafka.BoolValue(v.Bool())
	case agg.KindInt64:
		f.Value = kafka.IntValue(v.Int())
	case agg.KindFloat64:
		x := v.Float()
		if math.IsInf(x, 0) || math.IsNaN(x) {
			f.Value = kafka.NullValue()
			return nil
		}
		// A float whose text has no fraction or exponent reads back as an
		// integer: the number's text decides, as in the changelog.
		m.num = strconv.AppendFloat(m.num[:0], x, 'g', -1, 64)
		n, err := kafka.NumberValue(unsafe.String(unsafe.SliceData(m.num), len(m.num)))
		if err != nil {
			return fmt.Errorf("column %s: %w", name, err)
		}
		f.Value = n
	case agg.KindDecimal:
		d := v.Decimal()
		f.Value = kafka.StringValue(d.StringFixed(max(-d.Exponent(), 0)))
	case agg.KindString:
		f.Value = kafka.StringValue(jsonenc.ValidString(v.Str()))
	case agg.KindBytes:
		f.Value = kafka.StringValue(base64.StdEncoding.EncodeToString(v.Bytes()))
	case agg.KindTimestamp:
		f.Value = kafka.StringValue(v.Time().Format(agg.TimeLayout))
	case agg.KindStringSet:
		m.set = m.set[:0]
		for _, s := range v.Set() {
			m.set = append(m.set, kafka.StringValue(jsonenc.ValidString(s)))
		}
		f.Value = m.rows.Array(m.set...)
	default:
		return fmt.Errorf("column %s: value of kind %s", name, v.Kind())
	}
	return nil
}
