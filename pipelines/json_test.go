package pipelines

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/valyala/fastjson"
)

const typesJob = `
job: {name: j}
source:
  kafka:
    topics: [t]
    schema: {s: string, i: int64, f: float64, b: bool, d: "decimal(5,2)", ts: timestamp, raw: bytes}
sink: {table: {name: t, primary_key: [s], columns: {n: {agg: count}}}}
`

func TestFromJSON(t *testing.T) {
	rb := loadOne(t, typesJob).NewRowBuilder()
	var p fastjson.Parser
	decode := func(s string) (Row, error) {
		v, err := p.Parse(s)
		if err != nil {
			t.Fatalf("parse %s: %v", s, err)
		}
		return rb.FromJSON(v)
	}
	r, err := decode(`{"extra": [1], "s": "x", "i": -7, "f": 2, "b": true, "d": 12.5, "ts": "2026-01-02T03:04:05.5Z", "raw": "AQI="}`)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 5e8, time.UTC)
	want := Row{"x", int64(-7), 2.0, true, decimal.RequireFromString("12.5"), ts, []byte{1, 2}}
	if !reflect.DeepEqual(r[:4], want[:4]) || !r[4].(decimal.Decimal).Equal(want[4].(decimal.Decimal)) ||
		!r[5].(time.Time).Equal(ts) || !reflect.DeepEqual(r[6], want[6]) {
		t.Errorf("row %v, want %v", r, want)
	}
	r, err = decode(`{"s": null, "d": "-1.25", "ts": 1700000000123}`)
	if err != nil || r[0] != nil || r[1] != nil || !r[4].(decimal.Decimal).Equal(decimal.RequireFromString("-1.25")) ||
		!r[5].(time.Time).Equal(time.UnixMilli(1700000000123)) {
		t.Errorf("row %v, %v", r, err)
	}
	for _, c := range []struct{ in, msg string }{
		{`[1]`, "want a JSON object, got array"},
		{`{"s": 1}`, "field s"},
		{`{"i": 1.5}`, "field i"},
		{`{"i": "1"}`, "field i"},
		{`{"b": "true"}`, "field b"},
		{`{"d": 1234.5}`, "field d"},
		{`{"d": "x"}`, "field d"},
		{`{"d": true}`, "field d"},
		{`{"ts": "yesterday"}`, "field ts"},
		{`{"raw": "!!"}`, "field raw"},
	} {
		_, err := decode(c.in)
		if !errors.Is(err, ErrDecode) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want ErrDecode about %q", c.in, err, c.msg)
		}
	}
}

func TestFromRaw(t *testing.T) {
	p := loadOne(t, `
job: {name: j}
source: {kafka: {topics: [t], format: raw, schema: {key: string, value: bytes}}}
sink: {table: {name: t, primary_key: [key], columns: {n: {agg: count}}}}
`)
	r, err := p.NewRowBuilder().FromRaw([]byte("k"), []byte{0, 0xff})
	if err != nil || !reflect.DeepEqual(r, Row{"k", []byte{0, 0xff}}) {
		t.Errorf("row %v, %v", r, err)
	}
	if r, err := p.NewRowBuilder().FromRaw(nil, []byte("v")); err != nil || r[0] != nil {
		t.Errorf("null key: %v, %v", r, err)
	}
	// A string key must be UTF-8, or two keys could export alike (U+FFFD).
	if _, err := p.NewRowBuilder().FromRaw([]byte("k\xff"), nil); !errors.Is(err, ErrDecode) || !strings.Contains(err.Error(), "field key: not valid UTF-8") {
		t.Errorf("invalid UTF-8 key: %v, want ErrDecode", err)
	}
	q := loadOne(t, `
job: {name: j}
source: {kafka: {topics: [t], format: raw}}
sink: {table: {name: t, primary_key: [value], columns: {n: {agg: count}}}}
`)
	if r, err := q.NewRowBuilder().FromRaw([]byte("k"), []byte("v")); err != nil || !reflect.DeepEqual(r, Row{"v"}) {
		t.Errorf("default raw schema: %v, %v", r, err)
	}
}

// BenchmarkDecodeFilterMap parses ~100-byte JSON values, builds rows and
// runs the filter and map: the per-record cost of a YAML job before
// the exchange.
func BenchmarkDecodeFilterMap(b *testing.B) {
	p := loadOne(b, `
job: {name: j}
source: {kafka: {topics: [t], schema: {user: string, region: string, amount: int64, status: string}}}
transforms:
  - filter: 'status == "PAID"'
  - map: {amount_cents: 'amount * 100'}
sink: {table: {name: t, primary_key: [user], columns: {total: {agg: sum, from: amount_cents}}}}
`)
	values := make([][]byte, 1024)
	for i := range values {
		status := "PAID"
		if i%4 == 0 {
			status = "NEW"
		}
		values[i] = []byte(`{"user":"user-` + string(rune('a'+i%26)) + `","region":"EU","amount":` +
			strings.Repeat("7", 1+i%4) + `,"status":"` + status + `","note":"padding to a hundred bytes"}`)
	}
	rb, tr := p.NewRowBuilder(), p.NewTransformer()
	var parser fastjson.Parser
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		v, err := parser.ParseBytes(values[i%len(values)])
		if err != nil {
			b.Fatal(err)
		}
		r, err := rb.FromJSON(v)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tr.Apply(r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
