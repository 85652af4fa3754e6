package aggmerge

import (
	"math/rand/v2"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// TestStoreWhileWriting writes through a row cache far smaller than the
// table while the storer stores rows in the background after every Sync:
// rows are evicted and read back from pebble all the time, also while a
// store is writing them. Every row must equal a plain in-memory model, at
// every step, and after a reopen.
func TestStoreWhileWriting(t *testing.T) {
	dir := t.TempDir()
	tbl, err := Open(dir, crashSchema(), Options{CacheRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 200
	model := map[int64][3]int64{} // total, peak, n
	r := rand.New(rand.NewPCG(7, 7))
	for i := range 2000 {
		b, err := tbl.NewBatch(Writer{ID: "w"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			k, v := int64(r.IntN(keys)), int64(r.IntN(100))
			if err := b.Upsert(Aggregate, []agg.Value{agg.IntValue(k)}, []agg.Value{agg.IntValue(v), agg.IntValue(v), agg.IntValue(v)}); err != nil {
				t.Fatal(err)
			}
			m, ok := model[k]
			if !ok {
				m[1] = v
			}
			m[0], m[1], m[2] = m[0]+v, max(m[1], v), m[2]+1
			model[k] = m
		}
		if _, err := tbl.Apply(b); err != nil {
			t.Fatal(err)
		}
		if err := tbl.Sync(); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			checkModel(t, tbl, model)
		}
	}
	if err := tbl.Close(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = Open(dir, Schema{}, Options{}); err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	checkModel(t, tbl, model)
}

func checkModel(t *testing.T, tbl *Table, model map[int64][3]int64) {
	t.Helper()
	for k, m := range model {
		row, ok, err := tbl.Get([]agg.Value{agg.IntValue(k)})
		if err != nil || !ok {
			t.Fatalf("key %d: %v, found %v", k, err, ok)
		}
		if got := [3]int64{row.Values[0].Int(), row.Values[1].Int(), row.Values[2].Int()}; got != m {
			t.Fatalf("key %d: %v, model %v", k, got, m)
		}
	}
	n := 0
	if err := tbl.Scan(func(Row) error { n++; return nil }); err != nil || n != len(model) {
		t.Fatalf("scan: %d rows, %v; model %d", n, err, len(model))
	}
}
