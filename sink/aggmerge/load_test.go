package aggmerge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// loadRows makes n rows of bucket 0 of smallSchema, in random order; every
// tenth has a null note, and one has nulls only (no row, as Overwrite).
func loadRows(t *testing.T, tbl *Table, n int) []LoadRow {
	t.Helper()
	var rows []LoadRow
	for i := 0; len(rows) < n; i++ {
		k, err := tbl.EncodeKey(key(fmt.Sprintf("k%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if BucketOf(k, tbl.Schema().Buckets) != 0 {
			continue
		}
		vals := []agg.Value{agg.IntValue(int64(i)), agg.StringValue(fmt.Sprintf("note %d", i))}
		switch {
		case len(rows) == 7:
			vals = []agg.Value{agg.NullValue(), agg.NullValue()}
		case i%10 == 3:
			vals[1] = agg.NullValue()
		}
		rows = append(rows, LoadRow{Key: string(k), Vals: vals})
	}
	r := rand.New(rand.NewPCG(5, 6))
	r.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	return rows
}

// overwriteRows writes rows as the ordinary path does: Overwrite upserts,
// in batches of 1000.
func overwriteRows(t *testing.T, tbl *Table, w Writer, rows []LoadRow) {
	t.Helper()
	b, err := tbl.NewBatch(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if err := b.UpsertEncoded(Overwrite, []byte(r.Key), r.Vals); err != nil {
			t.Fatal(err)
		}
		if b.Len() == 1000 || i == len(rows)-1 {
			mustApply(t, tbl, b)
		}
	}
}

// tableView is what a reader sees of bucket 0: every row by Scan and by
// Get (of the given keys, absent ones included), the row count, the log's
// end, and the log's entries from offset from, each without its offset:
// sorted when unordered (a bulk load writes in key order, Apply in the
// order given), else in log order.
type tableView struct {
	scan, get []string
	count     uint64
	end       uint64
	log       []string
}

func viewOf(t *testing.T, tbl *Table, keys []LoadRow, from uint64, unordered bool) tableView {
	t.Helper()
	var v tableView
	err := tbl.Scan(func(r Row) error {
		v.scan = append(v.scan, vals(r.Key)+"="+vals(r.Values))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		kv, err := decodeTestKey(tbl, k.Key)
		if err != nil {
			t.Fatal(err)
		}
		r, ok, err := tbl.Get(kv)
		if err != nil {
			t.Fatal(err)
		}
		v.get = append(v.get, fmt.Sprintf("%s=%v:%s", vals(kv), ok, vals(r.Values)))
	}
	v.count = tbl.Count()
	_, v.end, err = tbl.LogOffsets(0)
	if err != nil {
		t.Fatal(err)
	}
	err = tbl.ReadLog(0, from, func(e *Entry) error {
		v.log = append(v.log, fmt.Sprintf("%v %s before %s after %s by %s/%d undo %v", e.Op, vals(e.Key), vals(e.Before), vals(e.After), e.Writer.ID, e.Writer.Epoch, e.Undo))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if unordered {
		slices.Sort(v.log)
	}
	return v
}

func decodeTestKey(tbl *Table, k string) ([]agg.Value, error) {
	return encoding.DecodeKey([]byte(k), tbl.keyTypes, nil)
}

func sameView(t *testing.T, what string, got, want tableView) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want []string
	}{{"scan", got.scan, want.scan}, {"get", got.get, want.get}, {"log", got.log, want.log}} {
		if !slices.Equal(c.got, c.want) {
			i := 0
			for i < min(len(c.got), len(c.want)) && c.got[i] == c.want[i] {
				i++
			}
			g, w := "(end)", "(end)"
			if i < len(c.got) {
				g = c.got[i]
			}
			if i < len(c.want) {
				w = c.want[i]
			}
			t.Fatalf("%s: %s differs at %d of %d/%d: got %q, want %q", what, c.name, i, len(c.got), len(c.want), g, w)
		}
	}
	if got.count != want.count || got.end != want.end {
		t.Fatalf("%s: %d rows, log end %d; want %d rows, log end %d", what, got.count, got.end, want.count, want.end)
	}
}

// TestLoadEqualsOverwrite: the same rows written into an empty bucket by
// Load and by Apply's Overwrite upserts give the same table to a reader:
// the same rows by Scan and Get, count and log end, and the same log
// entries but for their order. Then the same writes applied to both (an
// update, a delete and an insert touching loaded keys, which the loaded
// bucket must read from pebble) append the same entries in the same order,
// and a reopen (rows recovered from the log) changes nothing. The rows are
// more than one chunk.
func TestLoadEqualsOverwrite(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *Table {
		tbl, err := Open(filepath.Join(dir, name), smallSchema(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tbl.Close() })
		return tbl
	}
	ordinary, loaded := open("ordinary"), open("loaded")
	rows := loadRows(t, ordinary, loadChunk+5000)
	w := Writer{ID: "scale/totals@0/rebuild"}
	overwriteRows(t, ordinary, w, rows)
	n, err := loaded.Load(w, 0, rows)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(rows)-1 {
		t.Fatalf("loaded %d rows, want %d (all but the one of nulls)", n, len(rows)-1)
	}
	probe := rows[:200]
	want := viewOf(t, ordinary, probe, 0, true)
	sameView(t, "loaded", viewOf(t, loaded, probe, 0, true), want)

	end := want.end
	later := func(tbl *Table) {
		b, err := tbl.NewBatch(Writer{ID: "job/sink#0", Epoch: 3}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range probe[:50] {
			kv, err := decodeTestKey(tbl, r.Key)
			if err != nil {
				t.Fatal(err)
			}
			if i%5 == 4 {
				err = b.Delete(Aggregate, kv, nil)
			} else {
				err = b.Upsert(Aggregate, kv, []agg.Value{agg.IntValue(1), agg.StringValue("later")})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Upsert(Aggregate, key("new"), []agg.Value{agg.IntValue(1), agg.NullValue()}); err != nil {
			t.Fatal(err)
		}
		mustApply(t, tbl, b)
	}
	later(ordinary)
	later(loaded)
	want = viewOf(t, ordinary, probe, end, false)
	sameView(t, "after later writes", viewOf(t, loaded, probe, end, false), want)

	for _, tbl := range []*Table{ordinary, loaded} {
		if err := tbl.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ordinary, loaded = open("ordinary"), open("loaded")
	want = viewOf(t, ordinary, probe, 0, true)
	sameView(t, "reopened", viewOf(t, loaded, probe, 0, true), want)
}

// TestLoadRefuses: Load writes nothing into a bucket holding a row
// (ErrNotEmpty), nor rows of another bucket or a key given twice
// (ErrInvalid).
func TestLoadRefuses(t *testing.T) {
	tbl, err := Open(t.TempDir(), smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	rows := loadRows(t, tbl, 10)
	other := ""
	for i := 0; other == ""; i++ {
		k, err := tbl.EncodeKey(key(fmt.Sprintf("o%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if BucketOf(k, 2) == 1 {
			other = string(k)
		}
	}
	w := Writer{ID: "w"}
	vals := []agg.Value{agg.IntValue(1), agg.NullValue()}
	for _, c := range []struct {
		name string
		rows []LoadRow
		want error
	}{
		{"a key of another bucket", append(slices.Clone(rows), LoadRow{Key: other, Vals: vals}), ErrInvalid},
		{"a key twice", append(slices.Clone(rows), LoadRow{Key: rows[3].Key, Vals: vals}), ErrInvalid},
		{"too few values", append(slices.Clone(rows), LoadRow{Key: "x", Vals: vals[:1]}), ErrInvalid},
	} {
		if _, err := tbl.Load(w, 0, c.rows); !errors.Is(err, c.want) {
			t.Fatalf("%s: Load = %v, want %v", c.name, err, c.want)
		}
	}
	if _, end, _ := tbl.LogOffsets(0); end != 0 || tbl.Count() != 0 {
		t.Fatalf("refused loads wrote: log end %d, %d rows", end, tbl.Count())
	}
	overwriteRows(t, tbl, w, rows[:1])
	_, end, _ := tbl.LogOffsets(0)
	if _, err := tbl.Load(w, 0, rows[1:]); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("Load into a bucket of 1 row = %v, want ErrNotEmpty", err)
	}
	if _, e, _ := tbl.LogOffsets(0); e != end || tbl.Count() != 1 {
		t.Fatalf("a refused load wrote: log end %d (was %d), %d rows", e, end, tbl.Count())
	}
}

// TestLoadOverCachedAbsentRows: an empty bucket's row cache may hold
// entries of absent rows, dirty (a delete not stored yet) or clean (a
// write that changed nothing). Loading those keys must leave neither a
// stale "absent" to Get nor a delete that a later store writes over the
// loaded row: Get, Scan (which stores the dirty rows first) and a reopen
// see the loaded rows.
func TestLoadOverCachedAbsentRows(t *testing.T) {
	dir := t.TempDir()
	tbl, err := Open(dir, smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tbl.Close() }()
	rows := loadRows(t, tbl, 20)
	slices.SortFunc(rows, func(a, b LoadRow) int { return strings.Compare(a.Key, b.Key) })
	rows = slices.DeleteFunc(rows, func(r LoadRow) bool { return r.Vals[0].IsNull() })
	w := Writer{ID: "w"}
	b, err := tbl.NewBatch(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	deleted, unchanged := rows[2], rows[5]
	overwriteRows(t, tbl, w, []LoadRow{deleted})
	if err := b.DeleteEncoded(Overwrite, []byte(deleted.Key)); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteEncoded(Overwrite, []byte(unchanged.Key)); err != nil { // absent: changes nothing
		t.Fatal(err)
	}
	if res := mustApply(t, tbl, b); res.Entries != 1 || res.Unchanged != 1 {
		t.Fatalf("the deletes: %+v, want 1 entry and 1 unchanged", res)
	}
	if _, err := tbl.Load(w, 0, rows); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for _, r := range []LoadRow{deleted, unchanged} {
			kv, err := decodeTestKey(tbl, r.Key)
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err := tbl.Get(kv)
			if err != nil {
				t.Fatal(err)
			}
			if !ok || vals(got.Values) != vals(r.Vals) {
				t.Fatalf("%s: Get %s = %v %s, want %s", when, vals(kv), ok, vals(got.Values), vals(r.Vals))
			}
		}
		n := 0
		if err := tbl.Scan(func(Row) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != len(rows) || tbl.Count() != uint64(len(rows)) {
			t.Fatalf("%s: scanned %d rows, count %d, want %d", when, n, tbl.Count(), len(rows))
		}
	}
	check("loaded")
	check("stored") // the Scan stored the dirty delete's entry
	if err := tbl.Close(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = Open(dir, Schema{}, Options{}); err != nil {
		t.Fatal(err)
	}
	check("reopened")
}
