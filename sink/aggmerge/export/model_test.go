package export

import (
	"math/rand"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// TestCommittedModelTwoJobs interleaves two jobs writing disjoint columns
// of shared rows at random, with checkpoints and crashes undone exactly as
// the writer undoes them, and selects the committed changes with random
// transaction sizes and exporter restarts. It checks the visibility
// statement of the package doc:
//   - no exported image holds a value that only rolled-back writes of its
//     column's job produced;
//   - the records of a key come in log order, each starting from the row
//     the records before it left;
//   - once both jobs have committed everything, applying the records
//     gives the table.
func TestCommittedModelTwoJobs(t *testing.T) {
	s := seed(t)
	for round := range 20 {
		rng := rand.New(rand.NewSource(s + int64(round)))
		tbl := twoColumns(t)
		jobs := []*scriptWriter{newScriptWriter(t, tbl, "A", "a"), newScriptWriter(t, tbl, "B", "b")}
		base := []uint64{0, 0}
		ckpt := []uint64{0, 0}
		var got []change
		c := &cursor{}
		exportSome := func() {
			budget := 1 + rng.Intn(4)
			chs, err := committedChanges(tbl, c, tbl.LogEnds()[0], budget)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, chs...)
			if len(chs) > 0 && rng.Intn(3) == 0 { // the exporter restarts from the topic
				last := chs[len(chs)-1]
				*c = cursor{done: last.offset + 1, resume: last.resume}
			}
		}
		for range 60 {
			j := rng.Intn(2)
			w := jobs[j]
			switch r := rng.Intn(10); {
			case r < 5:
				w.add(int64(rng.Intn(4)), 1+rng.Int63n(1_000_000))
			case r < 6:
				w.clear(int64(rng.Intn(4)))
			case r < 8:
				ckpt[j]++
				base[j] = w.checkpoint(ckpt[j])
			default:
				w.restore(ckpt[j], base[j], undoValues(t, tbl, w, base[j]))
			}
			exportSome()
		}
		for j, w := range jobs {
			ckpt[j]++
			w.checkpoint(ckpt[j])
		}
		for range 1000 {
			before := c.done
			exportSome()
			if c.done == before && c.blocked == "" && c.done == tbl.LogEnds()[0] {
				break
			}
		}
		checkModel(t, s+int64(round), tbl, got)
	}
}

// undoValues is what the writer's undo restores: for each key the job
// changed past base, its column's value in the before-image of the job's
// first entry on the key (nil: cleared).
func undoValues(t *testing.T, tbl *aggmerge.Table, w *scriptWriter, base uint64) map[int64]*int64 {
	col := tbl.Schema().ValueIndex(w.col)
	out := map[int64]*int64{}
	err := tbl.ReadLog(0, base, func(e *aggmerge.Entry) error {
		if e.Op == aggmerge.MarkerEntry || group(e.Writer.ID) != group(w.w.ID) {
			return nil
		}
		k := e.Key[0].Int()
		if _, seen := out[k]; seen {
			return nil
		}
		out[k] = nil
		if v := at(e.Before, col); !v.IsNull() {
			x := v.Int()
			out[k] = &x
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func checkModel(t *testing.T, seed int64, tbl *aggmerge.Table, got []change) {
	t.Helper()
	// Values each column took through writes that were not rolled back.
	type kc struct {
		key int64
		col int
	}
	good := map[kc]map[int64]bool{}
	var rollbacks []marker
	_ = tbl.ReadLog(0, 0, func(e *aggmerge.Entry) error {
		if e.Op == aggmerge.MarkerEntry && e.Marker.Kind == aggmerge.MarkerRollback {
			rollbacks = append(rollbacks, marker{off: e.Offset, group: group(e.Writer.ID), m: e.Marker})
		}
		return nil
	})
	rolledBack := func(e *aggmerge.Entry) bool {
		for _, r := range rollbacks {
			if r.group == group(e.Writer.ID) && r.m.From <= e.Offset && e.Offset < r.m.To {
				return true
			}
		}
		return false
	}
	_ = tbl.ReadLog(0, 0, func(e *aggmerge.Entry) error {
		if e.Op == aggmerge.MarkerEntry || rolledBack(e) {
			return nil
		}
		for col := range 2 {
			if v := at(e.After, col); !v.IsNull() {
				k := kc{e.Key[0].Int(), col}
				if good[k] == nil {
					good[k] = map[int64]bool{}
				}
				good[k][v.Int()] = true
			}
		}
		return nil
	})
	for _, ch := range got {
		k := ch.key[0].Int()
		for _, img := range [][]agg.Value{ch.before, ch.after} {
			for col, v := range img {
				if !v.IsNull() && !good[kc{k, col}][v.Int()] {
					t.Fatalf("seed %d: change %s shows %d in column %d, a value only rolled-back writes made", seed, show(ch), v.Int(), col)
				}
			}
		}
	}
	if _, err := replayChanges(got, committedRows(t, tbl)); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
}

func seed(t *testing.T) int64 {
	s := *seedFlag
	if s == 0 {
		s = rand.Int63()
	}
	t.Logf("seed %d (rerun with -seed %d)", s, s)
	return s
}
