package kafka

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var rowCases = []string{
	`{}`,
	`{"a":1,"b":-2.5,"c":"x","d":true,"e":false,"f":null}`,
	`{"big":9223372036854775807,"over":9223372036854775808,"exp":1e3,"neg":-0,"frac":0.1}`,
	`{"s":"quote \" backslash \\ newline \n tab \t ctrl \u0001 unicode é 日本 \ud83d\ude00"}`,
	`{"nested":{"x":[1,"two",{"three":3},[],{}],"y":{"z":null}},"arr":[true,false,null]}`,
	`{"dup":1,"dup":2}`,
	`{"ключ":"значение","":"empty name"}`,
}

// normalize makes encoding/json's view comparable with Row.Map: numbers as
// float64 on both sides.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
	case int64:
		return float64(x)
	}
	return v
}

// TestRowsMatchEncodingJSON decodes each case with Rows and with
// encoding/json (the oracle) and compares; then encodes the row and decodes
// it again.
func TestRowsMatchEncodingJSON(t *testing.T) {
	dec := Rows()()
	for _, c := range rowCases {
		row, err := dec(&kgo.Record{Value: []byte(c)})
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		var want map[string]any
		if err := json.Unmarshal([]byte(c), &want); err != nil {
			t.Fatal(err)
		}
		if got := normalize(row.Map()); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", c, got, want)
		}
		enc, err := json.Marshal(row)
		if err != nil {
			t.Fatal(err)
		}
		var again map[string]any
		if err := json.Unmarshal(enc, &again); err != nil {
			t.Fatalf("%s: re-encoded %s: %v", c, enc, err)
		}
		if !reflect.DeepEqual(again, want) {
			t.Errorf("%s: re-encoded as %s", c, enc)
		}
		var back Row
		if err := json.Unmarshal(enc, &back); err != nil || back.String() != row.String() {
			t.Errorf("%s: UnmarshalJSON gives %s, %v", c, back, err)
		}
	}
}

func TestRowKindsAndAccessors(t *testing.T) {
	row, err := Rows()()(&kgo.Record{Value: []byte(`{"big":1e400}`)})
	if err == nil {
		t.Fatalf("1e400 decoded as %v, want an error (out of float64 range)", row)
	}
	row, err = Rows()()(&kgo.Record{Value: []byte(`{"i":42,"f":1.5,"s":"hi","b":true,"n":null,"o":{"k":[7,8]}}`)})
	if err != nil {
		t.Fatal(err)
	}
	i, ok := row.Get("i")
	if n, isInt := i.Int(); !ok || !isInt || n != 42 {
		t.Errorf("i = %v", i)
	}
	if f, _ := i.Float(); f != 42 {
		t.Errorf("i as float = %v", f)
	}
	if v, _ := row.Get("f"); v.Kind() != Float {
		t.Errorf("f kind %v", v.Kind())
	} else if f, _ := v.Float(); f != 1.5 {
		t.Errorf("f = %v", f)
	}
	if v, _ := row.Get("s"); v.Kind() != String {
		t.Errorf("s kind %v", v.Kind())
	} else if s, _ := v.Str(); s != "hi" {
		t.Errorf("s = %q", s)
	}
	if v, _ := row.Get("b"); v.Kind() != Bool {
		t.Errorf("b kind %v", v.Kind())
	}
	if v, ok := row.Get("n"); !ok || !v.IsNull() {
		t.Errorf("n = %v %v", v, ok)
	}
	if v, ok := row.Path("o", "k"); !ok || v.Kind() != Array || v.Len() != 2 {
		t.Errorf("o.k = %v %v", v, ok)
	} else if n, _ := v.Index(1).Int(); n != 8 {
		t.Errorf("o.k[1] = %v", n)
	}
	if _, ok := row.Get("missing"); ok {
		t.Error("missing field found")
	}
	if _, ok := row.Path("s", "x"); ok {
		t.Error("path through a string found")
	}
}

func TestRowsRejectNonObjects(t *testing.T) {
	dec := Rows()()
	for _, c := range []string{`[1]`, `"x"`, `3`, `{"a":`, ``, `{"a":1}x`, strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100)} {
		if row, err := dec(&kgo.Record{Value: []byte(c)}); err == nil {
			t.Errorf("%q decoded as %v, want an error", c, row)
		}
	}
}

// TestRowsKeepTheirMemory decodes many rows with one decoder, so chunks
// fill and roll over, and checks every row still reads as decoded: the
// decoder never writes memory it handed out.
func TestRowsKeepTheirMemory(t *testing.T) {
	dec := Rows()()
	const n = 20000
	rows := make([]Row, n)
	for i := range n {
		v := fmt.Sprintf(`{"id":%d,"name":"user-%d","field%d":"%s"}`, i, i, i%5000, strings.Repeat("x", i%300))
		r, err := dec(&kgo.Record{Value: []byte(v)})
		if err != nil {
			t.Fatal(err)
		}
		rows[i] = r
	}
	for i, r := range rows {
		want := fmt.Sprintf(`{"id":%d,"name":"user-%d","field%d":"%s"}`, i, i, i%5000, strings.Repeat("x", i%300))
		if r.String() != want {
			t.Fatalf("row %d reads %s, want %s", i, r, want)
		}
	}
	c := rows[0].Clone()
	if c.String() != rows[0].String() {
		t.Fatalf("clone %s of %s", c, rows[0])
	}
}

func TestValueConstructors(t *testing.T) {
	r := NewRow(Field{"a", IntValue(1)}, Field{"b", FloatValue(math.Inf(1))}, Field{"c", ArrayValue(StringValue("x"), BoolValue(true), NullValue())},
		Field{"d", ObjectValue(Field{"e", FloatValue(0.5)})})
	if got, want := r.String(), `{"a":1,"b":null,"c":["x",true,null],"d":{"e":0.5}}`; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}

// BenchmarkDecode compares the decoders on a ~100 B record (the raw
// consume benchmark's shape):
//
//	go test -run XXX -bench Decode ./operators/kafka/
func BenchmarkDecode(b *testing.B) {
	type purchase struct {
		User   string `json:"user"`
		Amount int64  `json:"amount"`
		TS     int64  `json:"ts"`
		Kind   string `json:"kind"`
		Region string `json:"region"`
		Seq    int64  `json:"seq"`
	}
	val := []byte(`{"user":"u00042","amount":417,"ts":1700000000042,"kind":"purchase","region":"eu-west-1","seq":42}`)
	rec := &kgo.Record{Value: val}
	run := func(name string, decode func() error) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := decode(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rec/s")
		})
	}
	rows := Rows()()
	run("rows", func() error { _, err := rows(rec); return err })
	typed := JSON[purchase]()()
	run("json-struct", func() error { _, err := typed(rec); return err })
	run("json-map", func() error { var m map[string]any; return json.Unmarshal(val, &m) })
}

func TestWithMetadata(t *testing.T) {
	ts := time.UnixMilli(1_700_000_000_123)
	rec := &kgo.Record{Topic: "t", Partition: 3, Offset: 42, Timestamp: ts, Key: []byte("k"),
		Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}, Value: []byte(`{"a":1}`)}
	got, err := WithMetadata(Rows())()(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Topic != "t" || got.Partition != 3 || got.Offset != 42 || !got.Timestamp.Equal(ts) || string(got.Key) != "k" ||
		len(got.Headers) != 1 || got.Headers[0].Key != "h" || got.Value.String() != `{"a":1}` {
		t.Fatalf("%+v", got)
	}
	if _, err := WithMetadata(Rows())()(&kgo.Record{Value: []byte("x")}); err == nil {
		t.Fatal("undecodable value passed")
	}
	raw, _ := Raw()()(rec)
	if string(raw) != `{"a":1}` {
		t.Fatalf("raw %q", raw)
	}
}
