package aggmerge

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
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

// TestAbsentRowsLeaveTheCache: once stored, the entry of a deleted row
// leaves a complete cache (a miss there means absent), so a table whose
// keys come and go does not grow its cache without bound.
func TestAbsentRowsLeaveTheCache(t *testing.T) {
	tbl, err := Open(t.TempDir(), crashSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	write := func(del bool) {
		b, err := tbl.NewBatch(Writer{ID: "w"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k := range 100 {
			key := []agg.Value{agg.IntValue(int64(k))}
			if del && k%2 == 0 {
				err = b.Delete(Aggregate, key, nil)
			} else if !del {
				err = b.Upsert(Aggregate, key, []agg.Value{agg.IntValue(1), agg.IntValue(1), agg.IntValue(1)})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tbl.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	write(false)
	write(true)
	if err := tbl.Scan(func(Row) error { return nil }); err != nil { // stores the rows
		t.Fatal(err)
	}
	tbl.mu.RLock()
	cached, complete := len(tbl.mu.cache.rows), tbl.mu.cache.complete
	tbl.mu.RUnlock()
	if !complete || cached != 50 {
		t.Fatalf("cache of %d entries (complete %v) after deleting 50 of 100 rows, want the 50 rows", cached, complete)
	}
	for k := range 100 {
		_, ok, err := tbl.Get([]agg.Value{agg.IntValue(int64(k))})
		if err != nil || ok != (k%2 == 1) {
			t.Fatalf("key %d: found %v, %v", k, ok, err)
		}
	}
}

// TestRowOrderIsKeyOrder: the storer's order (the keys' first 16 bytes,
// then the whole key) is bucket and key order, for keys that share long
// prefixes, differ only in length or in trailing zero bytes.
func TestRowOrderIsKeyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var rows []storedRow
	for range 5000 {
		k := make([]byte, r.IntN(24))
		for j := range k {
			k[j] = "\x00\x01ab"[r.IntN(4)]
		}
		rows = append(rows, storedRow{e: &cachedRow{key: string(k), bucket: uint32(r.IntN(3))}})
	}
	want := slices.Clone(rows)
	slices.SortFunc(want, func(a, b storedRow) int {
		return cmp.Or(cmp.Compare(a.e.bucket, b.e.bucket), strings.Compare(a.e.key, b.e.key))
	})
	order := make([]rowOrder, len(rows))
	for i := range rows {
		order[i] = newRowOrder(rows[i].e.bucket, rows[i].e.key, i)
	}
	slices.SortFunc(order, func(a, b rowOrder) int {
		return cmp.Or(a.compare(b), strings.Compare(rows[a.i].e.key, rows[b.i].e.key))
	})
	for i, o := range order {
		if got := rows[o.i].e; got.bucket != want[i].e.bucket || got.key != want[i].e.key {
			t.Fatalf("row %d: bucket %d key %q, want bucket %d key %q", i, got.bucket, got.key, want[i].e.bucket, want[i].e.key)
		}
	}
}
