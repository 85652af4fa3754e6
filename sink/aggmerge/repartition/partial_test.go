package repartition

import (
	"errors"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

func openTable(t *testing.T, dir string, sch aggmerge.Schema) *aggmerge.Table {
	t.Helper()
	tb, err := aggmerge.Open(dir, sch, aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	return tb
}

// TestPartialRoundTrip: a partial row of every value kind, with absent
// and null values, decodes to what was encoded; truncated, extended and
// foreign values are ErrPartial.
func TestPartialRoundTrip(t *testing.T) {
	str, i64 := agg.Type{Kind: agg.KindString}, agg.Type{Kind: agg.KindInt64}
	tb := openTable(t, t.TempDir(), aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "user", Type: str}, {Name: "n", Type: i64}},
		Values: []aggmerge.Column{
			{Name: "b", Type: agg.Type{Kind: agg.KindBool}, Func: "bool_or"},
			{Name: "i", Type: i64, Func: "sum"},
			{Name: "f", Type: agg.Type{Kind: agg.KindFloat64}, Func: "max"},
			{Name: "d", Type: agg.Decimal(38, 4), Func: "sum"},
			{Name: "s", Type: str, Func: "last_value"},
			{Name: "y", Type: agg.Type{Kind: agg.KindBytes}, Func: "last_value"},
			{Name: "ts", Type: agg.Type{Kind: agg.KindTimestamp}, Func: "max"},
			{Name: "set", Type: agg.Type{Kind: agg.KindStringSet}, Func: "collect_set"},
			{Name: "absent", Type: i64, Func: "sum"},
			{Name: "null", Type: i64, Func: "sum"},
		},
		Buckets: 4,
	})
	c, err := NewCodec(tb, "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	row := writer.Row{Kind: runtime.RowUpdateBefore,
		Key: []agg.Value{agg.StringValue("ada"), agg.IntValue(-7)},
		Vals: []agg.Value{agg.BoolValue(true), agg.IntValue(-1 << 40), agg.FloatValue(2.5),
			agg.DecimalValue(decimal.RequireFromString("123456789012345678901234.5678")),
			agg.StringValue("é\x00x"), agg.BytesValue([]byte{0, 1, 255}), agg.MicrosValue(1_700_000_000_000_000),
			agg.SetValue("b", "a"), {}, agg.NullValue()}}
	key, err := c.AppendKey(nil, &row)
	if err != nil {
		t.Fatal(err)
	}
	val, err := c.AppendValue(nil, &row)
	if err != nil {
		t.Fatal(err)
	}
	var got writer.Row
	if err := c.Decode(key, val, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != row.Kind || len(got.Key) != 2 || len(got.Vals) != len(row.Vals) {
		t.Fatalf("decoded %+v, want %+v", got, row)
	}
	for i := range row.Key {
		if !got.Key[i].Equal(row.Key[i]) {
			t.Errorf("key %d: %v, want %v", i, got.Key[i], row.Key[i])
		}
	}
	for i := range row.Vals {
		if !got.Vals[i].Equal(row.Vals[i]) || got.Vals[i].State() != row.Vals[i].State() || got.Vals[i].Kind() != row.Vals[i].Kind() {
			t.Errorf("value %d: %v (%v), want %v (%v)", i, got.Vals[i], got.Vals[i].State(), row.Vals[i], row.Vals[i].State())
		}
	}
	for name, v := range map[string][]byte{
		"empty":     nil,
		"truncated": val[:len(val)-1],
		"extended":  append(append([]byte{}, val...), 0),
		"version":   append([]byte{9}, val[1:]...),
		"kind":      append([]byte{val[0], 7}, val[2:]...),
	} {
		if err := c.Decode(key, v, &got); !errors.Is(err, ErrPartial) {
			t.Errorf("%s value: err = %v, want ErrPartial", name, err)
		}
	}
	if err := c.Decode(key[:len(key)-1], val, &got); !errors.Is(err, ErrPartial) {
		t.Errorf("truncated key: err = %v, want ErrPartial", err)
	}
	narrow, err := NewCodec(tb, "job", []string{"i"})
	if err != nil {
		t.Fatal(err)
	}
	if err := narrow.Decode(key, val, &got); !errors.Is(err, ErrPartial) {
		t.Errorf("a row of 10 values decoded for one column: err = %v", err)
	}
	if h := narrow.Headers(); len(h) != 2 || h[0].Key != HeaderJob || string(h[0].Value) != "job" ||
		h[1].Key != HeaderColumns || string(h[1].Value) != "i" {
		t.Errorf("headers of job's codec of column i: %v", h)
	}
	if _, err := NewCodec(tb, "job", []string{"nope"}); err == nil {
		t.Error("a codec for a column the table lacks was made")
	}
}
