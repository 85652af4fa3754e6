package aggmerge

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// keySchema is a table of sums: a write adds v to total, 1 to n, and
// raises top to v.
func keySchema() Schema {
	return Schema{
		Key: []Column{{Name: "k", Type: agg.Int64}},
		Values: []Column{
			{Name: "total", Type: agg.Int64, Func: "sum"},
			{Name: "n", Type: agg.Int64, Func: "sum"},
			{Name: "top", Type: agg.Int64, Func: "max"},
		},
		Buckets: 4,
		Delete:  DeleteAllow,
	}
}

// keyRow is a row of the model of keySchema.
type keyRow struct{ total, n, top int64 }

func (r keyRow) vals() []agg.Value {
	return []agg.Value{agg.IntValue(r.total), agg.IntValue(r.n), agg.IntValue(r.top)}
}

func keyRowOf(vals []agg.Value) keyRow {
	return keyRow{vals[0].Int(), vals[1].Int(), vals[2].Int()}
}

// TestKeyFilter writes many more keys than the row cache holds, so that
// most writes miss it and the key filter decides whether they read pebble:
// writes of new keys and of keys written long ago (evicted), deletes and
// writes of deleted keys, a Load into a bucket, undo back to a baseline,
// reopening (which builds the filter from the stored rows), and the filter
// outgrowing its plan again and again (growing by more filters). After every batch the keys it wrote
// must read as the model says, and at every baseline and at the end the
// whole table must equal the model. A filter that ever said "absent" of a
// row would merge a write into nothing: the sums would restart.
func TestKeyFilter(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runKeyFilter(t, seed) })
	}
}

func runKeyFilter(t *testing.T, seed uint64) {
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	s := keySchema()
	dir := t.TempDir()
	opts := Options{CacheRows: 32}
	tbl, err := Open(dir, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tbl.Close() }()
	model := map[int64]keyRow{}
	w := Writer{ID: "w", Epoch: 1}
	var next int64 // keys below next have been written at least once
	loadDone := false
	var built, chain, undos, reopens int
	bucketOf := func(k int64) int {
		b, err := tbl.Bucket([]agg.Value{agg.IntValue(k)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	newKey := func() int64 {
		next++
		return next - 1
	}
	check := func(where string, keys []int64) {
		t.Helper()
		for _, k := range keys {
			row, ok, err := tbl.Get([]agg.Value{agg.IntValue(k)})
			if err != nil {
				t.Fatalf("%s: get %d: %v", where, k, err)
			}
			want, has := model[k]
			if ok != has || ok && keyRowOf(row.Values) != want {
				t.Fatalf("seed %d %s: key %d is %v %v, want %v %v", seed, where, k, ok, row.Values, has, want)
			}
		}
	}
	checkAll := func(where string) {
		t.Helper()
		got := map[int64]keyRow{}
		err := tbl.Scan(func(row Row) error {
			got[row.Key[0].Int()] = keyRowOf(row.Values)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, model) {
			for k, v := range model {
				if g, ok := got[k]; !ok || g != v {
					t.Fatalf("seed %d %s: %d rows, want %d; key %d is %v %v, want %v", seed, where, len(got), len(model), k, g, ok, v)
				}
			}
			t.Fatalf("seed %d %s: %d rows, want %d", seed, where, len(got), len(model))
		}
	}
	// apply writes a batch: new keys, keys written before (most of them no
	// longer cached), deletes. It returns the keys written.
	apply := func(where string, undo bool) []int64 {
		t.Helper()
		b, err := tbl.NewBatch(w, nil)
		if err != nil {
			t.Fatal(err)
		}
		var keys []int64
		for range 1 + r.IntN(40) {
			var k int64
			switch x := r.IntN(10); {
			case x < 5 || next == 0:
				k = newKey()
			default:
				k = r.Int64N(next)
			}
			if bucketOf(k) == 0 && !loadDone {
				continue // bucket 0 stays empty for the Load
			}
			key := []agg.Value{agg.IntValue(k)}
			if r.IntN(10) == 0 {
				if err := b.Delete(Aggregate, key, nil); err != nil {
					t.Fatal(err)
				}
				delete(model, k)
			} else {
				v := r.Int64N(100)
				if err := b.Upsert(Aggregate, key, []agg.Value{agg.IntValue(v), agg.IntValue(1), agg.IntValue(v)}); err != nil {
					t.Fatal(err)
				}
				old, ok := model[k]
				if !ok {
					old.top = v
				}
				model[k] = keyRow{old.total + v, old.n + 1, max(old.top, v)}
			}
			keys = append(keys, k)
		}
		b.SetUndo(undo)
		before := tbl.mu.cache.keys
		if _, err := tbl.Apply(b); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if k := tbl.mu.cache.keys; k != nil {
			if k != before {
				built++
			}
			chain = max(chain, len(k.fs))
		}
		check(where, keys)
		return keys
	}
	// Fill the cache and beyond: the first eviction makes it incomplete.
	for i := range 20 {
		apply(fmt.Sprintf("fill %d", i), false)
	}
	if tbl.mu.cache.complete {
		t.Fatal("the row cache is still complete: the test would not test the key filter")
	}
	// Load bucket 0: its rows go to pebble only, and must be in the filter.
	var rows []LoadRow
	var loaded []int64
	for k := next; len(rows) < 200; k++ {
		if bucketOf(k) != 0 {
			continue
		}
		key, err := tbl.EncodeKey([]agg.Value{agg.IntValue(k)})
		if err != nil {
			t.Fatal(err)
		}
		v := int64(1000 + k)
		rows = append(rows, LoadRow{Key: string(key), Vals: keyRow{v, 1, v}.vals()})
		model[k] = keyRow{v, 1, v}
		loaded = append(loaded, k)
	}
	if _, err := tbl.Load(w, 0, rows); err != nil {
		t.Fatal(err)
	}
	next, loadDone = loaded[len(loaded)-1]+1, true
	check("after load", loaded)

	baseline := tbl.LogEnds()
	atBaseline := maps.Clone(model)
	for i := range 1000 {
		where := fmt.Sprintf("batch %d", i)
		apply(where, false)
		switch x := r.IntN(30); {
		case x == 0: // a checkpoint: the rows now are the new baseline
			if err := tbl.Sync(); err != nil {
				t.Fatal(err)
			}
			checkAll(where + " baseline")
			baseline, atBaseline = tbl.LogEnds(), maps.Clone(model)
		case x == 1: // undo back to the baseline, then write on
			undoTo(t, tbl, w, baseline)
			undos++
			model = maps.Clone(atBaseline)
			checkAll(where + " after undo")
			apply(where+" after undo", false)
		case x == 2 && r.IntN(4) == 0:
			if err := tbl.Close(); err != nil {
				t.Fatal(err)
			}
			if tbl, err = Open(dir, s, opts); err != nil {
				t.Fatalf("%s: reopen: %v", where, err)
			}
			reopens++
			if tbl.mu.cache.keys == nil {
				t.Fatalf("%s: reopened with %d rows over a cache of %d without a key filter", where, tbl.Count(), opts.CacheRows)
			}
			checkAll(where + " after reopen")
		}
	}
	checkAll("the end")
	k := tbl.mu.cache.keys
	t.Logf("%d rows, %d keys written; key filter built %d times by a write, up to %d filters, now %d of %d bytes; %d undos, %d reopens",
		len(model), next, built, chain, len(k.fs), k.bytes(), undos, reopens)
	if built < 1 || chain < 3 || undos == 0 || reopens == 0 {
		t.Errorf("the key filter was built %d times and grew to %d filters, %d undos, %d reopens: the test lost its teeth", built, chain, undos, reopens)
	}
}

// undoTo restores every key written past baseline to its row at baseline,
// as the writer's undo does (writer/undo.go): the first entry of each key
// past the baseline has the row as it was then.
func undoTo(t *testing.T, tbl *Table, w Writer, baseline []uint64) {
	t.Helper()
	b, err := tbl.NewBatch(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.SetUndo(true)
	stop := errors.New("stop")
	for bucket, from := range baseline {
		seen := map[int64]bool{}
		end := tbl.LogEnds()[bucket]
		err := tbl.ReadLog(bucket, from, func(e *Entry) error {
			if e.Offset >= end {
				return stop
			}
			if e.Op == MarkerEntry || e.Op == UpdateAfter && e.Offset > from {
				return nil
			}
			k := e.Key[0].Int()
			if seen[k] {
				return nil
			}
			seen[k] = true
			if e.Before == nil {
				return b.Delete(Overwrite, slices.Clone(e.Key), nil)
			}
			return b.Upsert(Overwrite, slices.Clone(e.Key), slices.Clone(e.Before))
		})
		if err != nil && !errors.Is(err, stop) {
			t.Fatal(err)
		}
	}
	if _, err := tbl.Apply(b); err != nil {
		t.Fatalf("undo: %v", err)
	}
}
