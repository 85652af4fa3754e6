package pipelines

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/valyala/fastjson"
)

const genJob = `
job: {name: g}
source:
  datagen:
    seed: 7
    fields:
      seq: {sequence: {start: 10, step: 3}}
      label: {sequence: {}, type: string}
      n: {uniform: {min: -5, max: 5}}
      x: {uniform: {min: 0.5, max: 1.5}}
      price: {uniform: {min: 1, max: 99}, type: "decimal(4,2)"}
      color: {one_of: [red, green, blue], weights: [1, 0, 3]}
      code: {one_of: ["1", "2"], type: int64, null_ratio: 0.5}
      at: {one_of: ["2026-01-01T00:00:00Z"], type: timestamp}
      blob: {one_of: ["a\u0000\"b"], type: bytes}
      ok: {one_of: ["true", "false"], type: bool}
      big: {uniform: {min: -9223372036854775808, max: 9223372036854775807}}
sink: {table: {name: t, primary_key: [seq], columns: {c: {agg: count}}}}
`

// Records are a pure function of the seed and their number, within the
// specified ranges and choices, and survive a JSON round trip.
func TestGenerator(t *testing.T) {
	p := loadOne(t, genJob)
	g, err := p.NewGenerator(0)
	if err != nil {
		t.Fatal(err)
	}
	g2, _ := p.NewGenerator(0)
	rb := p.NewRowBuilder()
	var parser fastjson.Parser
	colors := map[any]int{}
	nulls := 0
	const n = 2000
	for i := range int64(n) {
		r := g.Row(i)
		if !reflect.DeepEqual(r, g2.Row(i)) {
			t.Fatalf("record %d differs between two generators", i)
		}
		if r[0] != 10+3*i || r[1] != fmtInt(i) {
			t.Fatalf("record %d: sequence %v, label %v", i, r[0], r[1])
		}
		if v := r[2].(int64); v < -5 || v > 5 {
			t.Fatalf("n = %d", v)
		}
		if v := r[3].(float64); v < 0.5 || v >= 1.5 {
			t.Fatalf("x = %v", v)
		}
		if d := r[4].(decimal.Decimal); d.LessThan(decimal.NewFromInt(1)) || d.GreaterThan(decimal.NewFromInt(99)) || d.Exponent() < -2 {
			t.Fatalf("price = %v", d)
		}
		colors[r[5]]++
		if r[6] == nil {
			nulls++
		} else if c := r[6].(int64); c != 1 && c != 2 {
			t.Fatalf("code = %v", c)
		}
		if !r[7].(time.Time).Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) || string(r[8].([]byte)) != "a\x00\"b" {
			t.Fatalf("record %d: %v %q", i, r[7], r[8])
		}
		v, err := parser.ParseBytes(rb.AppendJSON(nil, r))
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		back, err := rb.FromJSON(v)
		if err != nil || !sameRow(back, r) {
			t.Fatalf("record %d: JSON round trip\n got %v, %v\nwant %v", i, back, err, r)
		}
	}
	if colors["green"] != 0 || colors["blue"] < 2*colors["red"] || colors["red"] == 0 {
		t.Errorf("weights 1:0:3 gave %v", colors)
	}
	if nulls < n/3 || nulls > 2*n/3 {
		t.Errorf("null_ratio 0.5 gave %d nulls of %d", nulls, n)
	}
	if _, err := loadOne(t, evalJob).NewGenerator(0); err == nil {
		t.Error("a kafka source has no generator")
	}
}

func fmtInt(i int64) string { return strconv.FormatInt(i, 10) }

// sameRow compares rows, decimals and times by value.
func sameRow(a, b Row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		switch x := a[i].(type) {
		case decimal.Decimal:
			if y, ok := b[i].(decimal.Decimal); !ok || !x.Equal(y) {
				return false
			}
		case time.Time:
			if y, ok := b[i].(time.Time); !ok || !x.Equal(y) {
				return false
			}
		default:
			if !reflect.DeepEqual(a[i], b[i]) {
				return false
			}
		}
	}
	return true
}

func TestUniformDecimalBounds(t *testing.T) {
	_, err := Load([]File{{Name: "g.yaml", Data: []byte(`
job: {name: g}
source: {datagen: {fields: {p: {uniform: {min: 1, max: 1000}, type: "decimal(4,2)"}}}}
sink: {table: {name: t, primary_key: [p], columns: {c: {agg: count}}}}
`)}}, Options{LookupEnv: noEnv})
	if err == nil || err.Error() != "g.yaml:3:56: source.datagen.fields.p.uniform.max: 1000 does not fit decimal(4,2)" {
		t.Errorf("got %v", err)
	}
}
