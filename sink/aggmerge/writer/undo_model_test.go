package writer

import (
	"flag"
	"fmt"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

var modelSeed = flag.Int64("undo-seed", 0, "seed of TestUndoModel (0: from the clock)")

// The columns of the model: jobA writes total and n (and retracts and
// deletes), jobB writes top, last and seqs, on the same keys.
var (
	modelA = []string{"total", "n"}
	modelB = []string{"top", "last", "seqs"}
)

func modelSchema() aggmerge.Schema {
	i64 := agg.Type{Kind: agg.KindInt64}
	return aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "k", Type: i64}},
		Values: []aggmerge.Column{
			{Name: "total", Type: i64, Func: "sum"},
			{Name: "n", Type: i64, Func: "count"},
			{Name: "top", Type: i64, Func: "max"},
			{Name: "last", Type: i64, Func: "last_value"},
			{Name: "seqs", Type: agg.Type{Kind: agg.KindString}, Func: "listagg"},
		},
		Buckets: 4,
		Delete:  aggmerge.DeleteAllow,
	}
}

// TestUndoModel writes random interleaved batches of two jobs to two
// identical tables, undoes jobA from its baseline in both, one of them
// interrupted by crashes at random points, and compares both with the
// oracle: jobA's columns as at the baseline, jobB's as before the undo, and
// a row only where some column holds a value.
func TestUndoModel(t *testing.T) {
	seed := *modelSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun with -undo-seed %d)", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	for round := range 30 {
		m := newUndoModel(t)
		m.writeRandom(rng, 1+rng.Intn(40))
		base := m.tables[0].LogEnds()
		atBase := modelRows(t, m.tables[0])
		m.writeRandom(rng, 1+rng.Intn(40))
		before := modelRows(t, m.tables[0])
		want := map[int64][]string{}
		for k := range union(atBase, before) {
			row := make([]string, 5)
			copy(row[:2], orNulls(atBase[k])[:2])
			copy(row[2:], orNulls(before[k])[2:])
			if !allNullRow(row) {
				want[k] = row
			}
		}
		m.undo(0, base, -1)
		for crashes := rng.Intn(3); crashes > 0; crashes-- {
			m.undo(1, base, rng.Intn(20))
		}
		m.undo(1, base, -1)
		for i, tbl := range m.tables {
			if got := modelRows(t, tbl); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("seed %d round %d table %d (interrupted: %v):\n got %v\nwant %v", seed, round, i, i == 1, got, want)
			}
		}
	}
}

type undoModel struct {
	t      *testing.T
	tables [2]*aggmerge.Table
}

func newUndoModel(t *testing.T) *undoModel {
	m := &undoModel{t: t}
	for i := range m.tables {
		tbl, err := aggmerge.Open(t.TempDir(), modelSchema(), aggmerge.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tbl.Close() })
		m.tables[i] = tbl
	}
	return m
}

// writeRandom applies n random batches of jobA (any of 3 subtasks) or jobB
// to both tables.
func (m *undoModel) writeRandom(rng *rand.Rand, n int) {
	for range n {
		writer, cols := base.WriterID{Job: "jobA", Sink: "sink", Subtask: rng.Intn(3)}.String(), modelA
		if rng.Intn(2) == 0 {
			writer, cols = "jobB/sink#0", modelB
		}
		type write struct {
			mode aggmerge.Mode
			del  bool
			key  []agg.Value
			vals []agg.Value
		}
		var ws []write
		for range 1 + rng.Intn(5) {
			w := write{mode: aggmerge.Aggregate, key: []agg.Value{agg.IntValue(int64(rng.Intn(12)))}}
			v := int64(1 + rng.Intn(9))
			if len(cols) == 2 {
				w.vals = []agg.Value{agg.IntValue(v), agg.IntValue(1)}
				switch rng.Intn(6) {
				case 0:
					w.mode = aggmerge.Retract
				case 1:
					w.del, w.vals = true, nil
				}
			} else {
				w.vals = []agg.Value{agg.IntValue(v), agg.IntValue(v), agg.StringValue(strconv.FormatInt(v, 10))}
			}
			ws = append(ws, w)
		}
		for _, tbl := range m.tables {
			b, err := tbl.NewBatch(aggmerge.Writer{ID: writer, Epoch: 1}, cols)
			if err != nil {
				m.t.Fatal(err)
			}
			for _, w := range ws {
				if w.del {
					err = b.Delete(w.mode, w.key, w.vals)
				} else {
					err = b.Upsert(w.mode, w.key, w.vals)
				}
				if err != nil {
					m.t.Fatal(err)
				}
			}
			if _, err := tbl.Apply(b); err != nil {
				m.t.Fatal(err)
			}
		}
	}
}

// undo undoes jobA in table i from base as recover does; crashAfter >= 0
// stops after that many keys, without the rest or the markers.
func (m *undoModel) undo(i int, base []uint64, crashAfter int) {
	tbl := m.tables[i]
	w := aggmerge.Writer{ID: "jobA/sink#0", Epoch: 1}
	cols := []int{0, 1}
	for b, from := range base {
		_, end, err := tbl.LogOffsets(b)
		if err != nil {
			m.t.Fatal(err)
		}
		if from == end {
			continue
		}
		p, err := planUndo(tbl, b, from, end, "jobA/sink", cols)
		if err != nil {
			m.t.Fatal(err)
		}
		if crashAfter >= 0 && crashAfter < len(p.keys) {
			p.keys, p.vals = p.keys[:crashAfter], p.vals[:crashAfter]
			batch, err := tbl.NewBatch(w, modelA)
			if err != nil {
				m.t.Fatal(err)
			}
			batch.SetUndo(true)
			for j := range p.keys {
				if err := batch.Upsert(aggmerge.Overwrite, p.keys[j], p.vals[j]); err != nil {
					m.t.Fatal(err)
				}
			}
			if _, err := tbl.Apply(batch); err != nil {
				m.t.Fatal(err)
			}
			return
		}
		crashAfter -= len(p.keys)
		if err := applyUndo(tbl, w, modelA, p, 1); err != nil {
			m.t.Fatal(err)
		}
	}
}

// modelRows returns the rows with every column printed, null for nothing.
func modelRows(t *testing.T, tbl *aggmerge.Table) map[int64][]string {
	rows := map[int64][]string{}
	err := tbl.Scan(func(r aggmerge.Row) error {
		row := make([]string, len(r.Values))
		for i, v := range r.Values {
			row[i] = "null"
			if !v.IsNull() {
				row[i] = v.String()
			}
		}
		rows[r.Key[0].Int()] = row
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func orNulls(row []string) []string {
	if row == nil {
		return []string{"null", "null", "null", "null", "null"}
	}
	return row
}

func allNullRow(row []string) bool {
	for _, v := range row {
		if v != "null" {
			return false
		}
	}
	return true
}

func union(a, b map[int64][]string) map[int64]bool {
	keys := map[int64]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}
