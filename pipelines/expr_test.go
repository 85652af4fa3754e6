package pipelines

import (
	"errors"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/shopspring/decimal"
)

func loadOne(t testing.TB, yaml string) *Pipeline {
	t.Helper()
	ps, err := Load([]File{{Name: "job.yaml", Data: []byte(yaml)}}, Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return ps[0]
}

// row makes a row of p's width with the input slots set.
func row(p *Pipeline, in ...any) Row {
	r := make(Row, p.Width)
	copy(r, in)
	return r
}

const evalJob = `
job: {name: j}
source:
  kafka:
    topics: [t]
    schema: {status: string, amount: int64, price: float64, at: timestamp, dec: "decimal(10,2)", name: string}
transforms:
  - filter: 'status == "PAID"'
  - map:
      cents: amount * 100
      ratio: price / 2
      day: at.Format("2006-01-02")
      big: amount > 1000
      dec2: dec
      upper_name: upper(name)
      maybe: 'amount > 5 ? amount : nil'
  - map: {cents: 'cents + 1', amount: cents}
  - filter: cents > 0
sink:
  table: {name: t, primary_key: [day], columns: {total: {agg: sum, from: cents}}}
`

// Apply computes what the expressions say, converted to the field types,
// with each map seeing the record as it was before it.
func TestTransformerApply(t *testing.T) {
	p := loadOne(t, evalJob)
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	d := decimal.RequireFromString("12.34")
	tr := p.NewTransformer()
	out := p.Output
	get := func(r Row, name string) any {
		f, ok := out.Field(name)
		if !ok {
			t.Fatalf("no output field %q", name)
		}
		return r[f.Slot]
	}
	r := row(p, "PAID", int64(7), 3.0, at, d, "bob")
	keep, err := tr.Apply(r)
	if err != nil || !keep {
		t.Fatalf("Apply = %v, %v", keep, err)
	}
	for name, want := range map[string]any{
		"cents": int64(701), "amount": int64(700), "ratio": 1.5, "day": "2026-03-04", "big": false,
		"upper_name": "BOB", "maybe": int64(7), "status": "PAID", "price": 3.0,
	} {
		if got := get(r, name); got != want {
			t.Errorf("%s = %v (%T), want %v (%T)", name, got, got, want, want)
		}
	}
	if got := get(r, "dec2").(decimal.Decimal); !got.Equal(d) {
		t.Errorf("dec2 = %v", got)
	}
	if f, _ := out.Field("dec2"); f.Type.String() != "decimal(10,2)" {
		t.Errorf("a copied decimal keeps its type, got %s", f.Type)
	}

	r = row(p, "PAID", int64(3), 3.0, at, d, "x")
	if _, err := tr.Apply(r); err != nil || get(r, "maybe") != nil {
		t.Errorf("a nil branch gives null: %v, %v", get(r, "maybe"), err)
	}
	r = row(p, "NEW", int64(7), 3.0, at, d, "x")
	if keep, err := tr.Apply(r); keep || err != nil {
		t.Errorf("first filter: %v, %v", keep, err)
	}
	r = row(p, "PAID", int64(-7), 3.0, at, d, "x")
	if keep, err := tr.Apply(r); keep || err != nil {
		t.Errorf("last filter: %v, %v", keep, err)
	}
}

// A failing expression (here a null operand) is an ErrEval error, for the
// source's on_error policy; the transformer goes on with the next row.
func TestTransformerEvalError(t *testing.T) {
	p := loadOne(t, evalJob)
	tr := p.NewTransformer()
	r := row(p, "PAID", nil, 3.0, time.Unix(0, 0), decimal.Zero, "x")
	keep, err := tr.Apply(r)
	if keep || !errors.Is(err, ErrEval) {
		t.Fatalf("Apply = %v, %v; want ErrEval", keep, err)
	}
	r = row(p, nil, int64(1), 3.0, time.Unix(0, 0), decimal.Zero, "x")
	if keep, err := tr.Apply(r); keep || !errors.Is(err, ErrEval) {
		t.Errorf("a null in a comparison: %v, %v; want ErrEval", keep, err)
	}
	r = row(p, "PAID", int64(1), 3.0, time.Unix(0, 0), decimal.Zero, "x")
	if keep, err := tr.Apply(r); !keep || err != nil {
		t.Errorf("after an error: %v, %v", keep, err)
	}
}

// Nulls fail typed operators; guards and ?? handle them.
func TestNullGuards(t *testing.T) {
	s := &Schema{Fields: []SchemaField{{Name: "amount", Type: agg.Int64, Slot: 0}, {Name: "status", Type: agg.String, Slot: 1}}}
	for _, c := range []struct {
		src  string
		want any
	}{
		{`status == nil`, true},
		{`(status ?? "") == "PAID"`, false},
		{`amount != nil && amount > 0`, false},
		{`int((amount ?? 0) + 2)`, int64(2)},
	} {
		p, err := Compile(c.src, s)
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		if got, err := p.NewEvaluator().Eval(Row{nil, nil}); got != c.want || err != nil {
			t.Errorf("%s = %v, %v; want %v", c.src, got, err, c.want)
		}
	}
}

// The map values are swapped, not copied twice: both expressions read the
// record as it was before the map.
func TestMapSeesInput(t *testing.T) {
	p := loadOne(t, `
job: {name: j}
source: {kafka: {topics: [t], schema: {a: int64, b: int64}}}
transforms:
  - map: {a: b, b: a}
  - map: {c: a - b}
sink: {table: {name: t, primary_key: [a], columns: {c: {agg: sum}}}}
`)
	r := row(p, int64(1), int64(10))
	if _, err := p.NewTransformer().Apply(r); err != nil {
		t.Fatal(err)
	}
	a, _ := p.Output.Field("a")
	b, _ := p.Output.Field("b")
	c, _ := p.Output.Field("c")
	if r[a.Slot] != int64(10) || r[b.Slot] != int64(1) || r[c.Slot] != int64(9) {
		t.Errorf("a=%v b=%v c=%v, want 10 1 9", r[a.Slot], r[b.Slot], r[c.Slot])
	}
}

// BenchmarkFilterMap runs the filter and map over 1M rows per
// iteration; rows/s is the figure to read.
func BenchmarkFilterMap(b *testing.B) {
	p := loadOne(b, `
job: {name: j}
source: {kafka: {topics: [t], schema: {user: string, region: string, amount: int64, status: string}}}
transforms:
  - filter: 'status == "PAID"'
  - map: {amount_cents: 'amount * 100'}
sink: {table: {name: t, primary_key: [user], columns: {total: {agg: sum, from: amount_cents}}}}
`)
	const n = 1 << 20
	slots := make([]any, n*p.Width)
	rows := make([]Row, n)
	users := []string{"ann", "bob", "cid", "dee"}
	for i := range rows {
		rows[i] = slots[i*p.Width : (i+1)*p.Width : (i+1)*p.Width]
		status := "PAID"
		if i%4 == 0 {
			status = "NEW"
		}
		copy(rows[i], []any{users[i%4], "EU", int64(i % 5000), status})
	}
	tr := p.NewTransformer()
	b.ResetTimer()
	for b.Loop() {
		for _, r := range rows {
			if _, err := tr.Apply(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)*n/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/row")
}

func TestEnvVariableRefused(t *testing.T) {
	s := &Schema{Fields: []SchemaField{{Name: "a", Type: agg.Int64}}}
	_, err := CompileFilter(`$env["a"] > 1`, s)
	if err == nil || err.Error() != "1:1: $env is not supported: name the fields" {
		t.Errorf("compile = %v", err)
	}
}

func TestCompileErrorsPlaced(t *testing.T) {
	s := &Schema{Fields: []SchemaField{{Name: "a", Type: agg.Int64}, {Name: "s", Type: agg.String}}}
	if _, err := Compile("a +\n  s", s); err == nil || err.Error() != "1:3: invalid operation: + (mismatched types int64 and string)" {
		t.Errorf("got %v", err)
	}
	if _, err := CompileFilter("a + 1", s); err == nil || err.Error() != "1:1: expected bool, but got int" {
		t.Errorf("got %v", err)
	}
	if p, err := Compile("s + string(a)", s); err != nil || p.Type() != agg.String || p.Source() != "s + string(a)" {
		t.Errorf("got %v, %v", p, err)
	}
}
