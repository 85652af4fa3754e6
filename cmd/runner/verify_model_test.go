package main

import (
	"testing"

	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// TestVerifyModel folds writes of two lanes (partitions) into the model
// and checks what it accepts: exact results where the order of lanes does
// not matter, one lane's last or first value, a list's elements in any
// order, float sums up to rounding, and nothing else.
func TestVerifyModel(t *testing.T) {
	col := func(name, fn string, typ agg.Type, params map[string]string) pipelines.TableColumn {
		return pipelines.TableColumn{Name: name, Func: fn, Type: typ, Params: params}
	}
	m, err := newModel(&pipelines.Table{Key: []pipelines.SchemaField{{Name: "k", Type: agg.String}}, Columns: []pipelines.TableColumn{
		col("n", "sum", agg.Int64, nil), col("last", "last_value", agg.Int64, nil), col("lastnn", "last_non_null_value", agg.Int64, nil),
		col("first", "first_value", agg.Int64, nil), col("tags", "listagg", agg.String, map[string]string{"delimiter": ";"}),
		col("f", "sum", agg.Float64, nil),
	}})
	if err != nil {
		t.Fatal(err)
	}
	null := agg.NullValue()
	writes := []struct {
		lane lane
		vals []agg.Value
	}{
		{lane{part: 0}, []agg.Value{agg.IntValue(1), agg.IntValue(10), agg.IntValue(10), agg.IntValue(10), agg.StringValue("a"), agg.FloatValue(0.1)}},
		{lane{part: 1}, []agg.Value{agg.IntValue(2), agg.IntValue(20), null, agg.IntValue(20), agg.StringValue("b"), agg.FloatValue(0.2)}},
		{lane{part: 0}, []agg.Value{agg.IntValue(3), agg.IntValue(30), agg.IntValue(30), agg.IntValue(30), agg.StringValue("c"), agg.FloatValue(0.3)}},
	}
	for _, w := range writes {
		if err := m.add(w.lane, []agg.Value{agg.StringValue("x")}, w.vals); err != nil {
			t.Fatal(err)
		}
	}
	e, err := m.expect(`{"k":"x"}`)
	if err != nil || e == nil {
		t.Fatalf("expect: %v, %v", e, err)
	}
	for _, c := range []struct {
		col       int
		ok, wrong []string
	}{
		{0, []string{"6"}, []string{"5", "null"}},
		{1, []string{"30", "20"}, []string{"10", "null"}},                 // the last of lane 0 or of lane 1
		{2, []string{"30"}, []string{"null", "10", "20"}},                 // lane 1's only value is null
		{3, []string{"10", "20"}, []string{"30"}},                         // the first of either lane
		{4, []string{`"a;b;c"`, `"b;a;c"`}, []string{`"a;c"`, `"a;b;b"`}}, // the elements in any order
		{5, []string{"0.6000000000000001", "0.6", "0.6000000000000002"}, []string{"0.61", "null"}},
	} {
		for _, got := range c.ok {
			if !e[c.col].holds(got) {
				t.Errorf("column %s: %s refused, expected %s", m.cols[c.col].col.Name, got, &e[c.col])
			}
		}
		for _, got := range c.wrong {
			if e[c.col].holds(got) {
				t.Errorf("column %s: %s accepted, expected %s", m.cols[c.col].col.Name, got, &e[c.col])
			}
		}
	}
	if e, _ := m.expect(`{"k":"y"}`); e != nil {
		t.Errorf("a key never written: %v", e)
	}
}
