package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// columns lists a table's column names, key first.
func columns(s aggmerge.Schema) []string {
	var names []string
	for _, c := range s.Key {
		names = append(names, c.Name)
	}
	for _, c := range s.Values {
		names = append(names, c.Name)
	}
	return names
}

// rowCells renders a row as one JSON value per column, key first (see
// cell).
func rowCells(s aggmerge.Schema, r aggmerge.Row) ([]string, error) {
	cells := make([]string, 0, len(s.Key)+len(s.Values))
	for _, v := range r.Key {
		cells = append(cells, string(agg.AppendJSON(nil, v)))
	}
	for i, c := range s.Values {
		cell, err := valueCell(c, r.Values[i])
		if err != nil {
			return nil, err
		}
		cells = append(cells, cell)
	}
	return cells, nil
}

// valueCell renders the value of column c as JSON. Sketch columns show
// their count: rbm32/rbm64 the exact number of distinct ids, hll the
// estimate.
func valueCell(c aggmerge.Column, v agg.Value) (string, error) {
	if v.IsNull() {
		return "null", nil
	}
	var n uint64
	var err error
	switch c.Func {
	case "rbm32":
		b, e := agg.Bitmap32(v)
		if err = e; e == nil {
			n = b.GetCardinality()
		}
	case "rbm64":
		b, e := agg.Bitmap64(v)
		if err = e; e == nil {
			n = b.GetCardinality()
		}
	case "hll":
		n, err = agg.HLLEstimate(v)
	default:
		return string(agg.AppendJSON(nil, v)), nil
	}
	if err != nil {
		return "", fmt.Errorf("column %s: %w", c.Name, err)
	}
	return strconv.FormatUint(n, 10), nil
}

// parseKey reads a primary key written as a JSON object of the key columns
// ({"region": "eu"}).
func parseKey(s aggmerge.Schema, text string) ([]agg.Value, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("key %s: want a JSON object of the key columns: %w", text, err)
	}
	if len(m) != len(s.Key) {
		return nil, fmt.Errorf("key %s: want exactly the key columns %v", text, columns(aggmerge.Schema{Key: s.Key}))
	}
	key := make([]agg.Value, len(s.Key))
	for i, c := range s.Key {
		raw, ok := m[c.Name]
		if !ok {
			return nil, fmt.Errorf("key %s: no column %q", text, c.Name)
		}
		v, err := keyValue(c.Type, raw)
		if err != nil {
			return nil, fmt.Errorf("key column %s: %w", c.Name, err)
		}
		key[i] = v
	}
	return key, nil
}

func keyValue(t agg.Type, raw json.RawMessage) (agg.Value, error) {
	var x any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil {
		return agg.Value{}, err
	}
	var v agg.Value
	err := fmt.Errorf("%s is not a %s", raw, t)
	switch x := x.(type) {
	case string:
		switch t.Kind {
		case agg.KindString:
			v, err = agg.StringValue(x), nil
		case agg.KindDecimal:
			var d decimal.Decimal
			if d, err = decimal.NewFromString(x); err == nil {
				v = agg.DecimalValue(d)
			}
		case agg.KindTimestamp:
			var ts time.Time
			if ts, err = time.Parse(time.RFC3339Nano, x); err == nil {
				v = agg.TimestampValue(ts)
			}
		case agg.KindBytes:
			var b []byte
			if b, err = base64.StdEncoding.DecodeString(x); err == nil {
				v = agg.BytesValue(b)
			}
		}
	case json.Number:
		switch t.Kind {
		case agg.KindInt64:
			var i int64
			if i, err = x.Int64(); err == nil {
				v = agg.IntValue(i)
			}
		case agg.KindFloat64:
			var f float64
			if f, err = x.Float64(); err == nil {
				v = agg.FloatValue(f)
			}
		case agg.KindDecimal:
			var d decimal.Decimal
			if d, err = decimal.NewFromString(x.String()); err == nil {
				v = agg.DecimalValue(d)
			}
		}
	case bool:
		if t.Kind == agg.KindBool {
			v, err = agg.BoolValue(x), nil
		}
	}
	if err != nil {
		return agg.Value{}, err
	}
	return agg.Conform(t, v)
}
