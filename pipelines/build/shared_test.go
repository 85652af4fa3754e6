package build

import (
	"context"
	"sync"
	"testing"

	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// twoJobs write disjoint columns of one table, with their own checkpoints.
const twoJobs = `
job: {name: counts, parallelism: 2}
source:
  datagen: {seed: 1, rate: 0, count: 4000, fields: {k: {uniform: {min: 1, max: 50}}}}
sink:
  table: {name: shared, primary_key: [k], buckets: 4, columns: {hits: {agg: count}}}
---
job: {name: maxes}
source:
  datagen: {seed: 2, rate: 0, count: 3000, fields: {k: {uniform: {min: 1, max: 50}}, v: {sequence: {}}}}
sink:
  table: {name: shared, primary_key: [k], buckets: 4, columns: {top: {agg: max, from: v}}}
`

// TestSharedTable runs two jobs of one file in one Env: the table gets
// both jobs' columns, each equal to what its own input gives.
func TestSharedTable(t *testing.T) {
	ps, err := pipelines.Load([]pipelines.File{{Name: "two.yaml", Data: []byte(twoJobs)}}, pipelines.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hits, top := map[int64]int64{}, map[int64]int64{}
	g0, _ := ps[0].NewGenerator(0)
	for n := range int64(4000) {
		hits[g0.Row(n)[0].(int64)]++
	}
	g1, _ := ps[1].NewGenerator(0)
	for n := range int64(3000) {
		r := g1.Row(n)
		top[r[0].(int64)] = max(top[r[0].(int64)], r[1].(int64))
	}
	e := NewEnv(Options{DataDir: t.TempDir(), Logger: testLogger()})
	if err := e.OpenTables(ps); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var wg sync.WaitGroup
	errs := make([]error, len(ps))
	for i, p := range ps {
		j, err := e.Build(p, runtime.RestoreLatest)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = j.Run(context.Background())
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	tab, _ := e.Table("shared")
	if names := columnsOf(tab.Schema()); names != "k hits top" {
		t.Fatalf("columns %q", names)
	}
	n := 0
	err = tab.Scan(func(r aggmerge.Row) error {
		n++
		k := r.Key[0].Int()
		if want, ok := hits[k]; !ok != r.Values[0].IsNull() || ok && r.Values[0].Int() != want {
			t.Errorf("k %d hits %v, want %d", k, r.Values[0], hits[k])
		}
		if want, ok := top[k]; !ok != r.Values[1].IsNull() || ok && r.Values[1].Int() != want {
			t.Errorf("k %d top %v, want %d", k, r.Values[1], top[k])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[int64]bool{}
	for k := range hits {
		keys[k] = true
	}
	for k := range top {
		keys[k] = true
	}
	if n != len(keys) {
		t.Fatalf("%d rows, want %d", n, len(keys))
	}
}

func columnsOf(s aggmerge.Schema) string {
	out := ""
	for _, c := range append(append([]aggmerge.Column(nil), s.Key...), s.Values...) {
		if out != "" {
			out += " "
		}
		out += c.Name
	}
	return out
}

// TestUnion merges two datagen sources and a table counts both.
func TestUnion(t *testing.T) {
	p := load(t, `
job: {name: union, parallelism: 2}
source:
  - datagen: {seed: 1, rate: 0, count: 3000, fields: {k: {one_of: [a, b]}}}
  - datagen: {seed: 2, rate: 0, count: 2000, fields: {k: {one_of: [b, c]}}}
sink:
  table: {name: counts, primary_key: [k], columns: {n: {agg: count}}}
`)
	want := map[string]int64{}
	for i, count := range []int64{3000, 2000} {
		g, err := p.NewGenerator(i)
		if err != nil {
			t.Fatal(err)
		}
		for n := range count {
			want[g.Row(n)[0].(string)]++
		}
	}
	e := newEnv(t, t.TempDir(), p)
	defer e.Close()
	j, err := e.Build(p, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	tab, _ := e.Table("counts")
	got := map[string]int64{}
	if err := tab.Scan(func(r aggmerge.Row) error { got[r.Key[0].Str()] = r.Values[0].Int(); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != want["c"] {
		t.Fatalf("counts %v, want %v", got, want)
	}
}
