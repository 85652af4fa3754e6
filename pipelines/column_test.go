package pipelines

import (
	"errors"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

// Column values for the datagen example's tables, checked one by one
// against the values agg builds directly.
func TestColumnValues(t *testing.T) {
	p := load(t, Options{}, "testdata/valid/datagen.yaml")[0]
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	// Input slots: user_id page latency seq price at; then slow, user.
	r := row(p, int64(42), "cart", 120.5, int64(7), decimal.RequireFromString("9.5"), at)
	if _, err := p.NewTransformer().Apply(r); err != nil {
		t.Fatal(err)
	}
	want := map[string]agg.Value{
		"visitors":     agg.Bitmap32Value(42),
		"approx":       agg.HLLValue([]byte("42")),
		"max_latency":  agg.FloatValue(120.5),
		"last_latency": agg.FloatValue(120.5),
		"any_slow":     agg.BoolValue(true),
		"revenue":      agg.DecimalValue(decimal.RequireFromString("9.50")),
		"hits":         agg.IntValue(1),
		"pages":        agg.SetValue("cart"),
		"trail":        agg.StringValue("cart"),
		"first_seen":   agg.TimestampValue(at),
	}
	n := 0
	for _, tab := range p.Tables {
		for i := range tab.Columns {
			c := &tab.Columns[i]
			got, err := c.Value(r)
			if err != nil || !got.Equal(want[c.Name]) {
				t.Errorf("%s = %v, %v; want %v", c.Name, got, err, want[c.Name])
			}
			n++
		}
	}
	if n != len(want) {
		t.Errorf("checked %d columns, want %d", n, len(want))
	}
	// A null field is a null input (a count of it too); an out-of-range id fails.
	r[0] = nil
	if v, err := p.Tables[0].Columns[0].Value(r); err != nil || v.State() != agg.Null {
		t.Errorf("null id: %v, %v", v, err)
	}
	r[0] = int64(-1)
	if _, err := p.Tables[0].Columns[0].Value(r); !errors.Is(err, ErrEval) {
		t.Errorf("negative id: %v", err)
	}
}

func TestAggValue(t *testing.T) {
	d := decimal.RequireFromString("1.5")
	for _, c := range []struct {
		t    agg.Type
		in   any
		want agg.Value
	}{
		{agg.String, "a", agg.StringValue("a")},
		{agg.Int64, int64(-3), agg.IntValue(-3)},
		{agg.Float64, 2.5, agg.FloatValue(2.5)},
		{agg.Bool, true, agg.BoolValue(true)},
		{agg.Decimal(4, 2), d, agg.DecimalValue(d)},
		{agg.Timestamp, time.UnixMicro(5), agg.MicrosValue(5)},
		{agg.Bytes, []byte{1}, agg.BytesValue([]byte{1})},
		{agg.Int64, nil, agg.NullValue()},
	} {
		got, err := AggValue(c.t, c.in)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("AggValue(%s, %v) = %v, %v; want %v", c.t, c.in, got, err, c.want)
		}
	}
	if _, err := AggValue(agg.Int64, "x"); !errors.Is(err, ErrEval) {
		t.Errorf("wrong Go type: %v", err)
	}
	if _, err := AggValue(agg.Decimal(2, 1), decimal.RequireFromString("123.4")); err == nil {
		t.Error("a decimal beyond the precision must fail")
	}
}
