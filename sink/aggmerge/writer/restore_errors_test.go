package writer

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/state"
)

// The tests here drive the sink's Open (and so recover) and Snapshot with a
// hand-built runtime.Context, as the runtime calls them on restore.

const testBuckets = 4

func sumSchema() aggmerge.Schema {
	i64 := agg.Type{Kind: agg.KindInt64}
	return aggmerge.Schema{
		Key:     []aggmerge.Column{{Name: "k", Type: i64}},
		Values:  []aggmerge.Column{{Name: "total", Type: i64, Func: "sum"}},
		Buckets: testBuckets,
	}
}

func openSumTable(t *testing.T, dir string) *aggmerge.Table {
	t.Helper()
	tbl, err := aggmerge.Open(dir, sumSchema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}

// openSink opens subtask i of p of sink "jobA/table", restoring items from
// checkpoint 7 when items is not nil.
func openSink(tbl *aggmerge.Table, i, p int, items [][]byte) (*sink, error) {
	cfg := Config{Table: tbl}
	cfg.setDefaults()
	s := newSink(cfg)
	ctx := &runtime.Context{Job: "jobA", Operator: "table", Subtask: i, Parallelism: p,
		Logger: slog.New(slog.DiscardHandler)}
	if items != nil {
		ctx.Restored, ctx.RestoredOK = 7, true
		ctx.State = state.OperatorState{Unions: map[string][][]byte{stateList: items}}
	}
	return s, s.Open(ctx)
}

// snapshot returns the union items the p subtasks of the sink save at a
// checkpoint.
func snapshot(t *testing.T, tbl *aggmerge.Table, p int) [][]byte {
	t.Helper()
	var items [][]byte
	for i := range p {
		s, err := openSink(tbl, i, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, st.Unions[stateList]...)
	}
	return items
}

// writeKeys adds v to keys 0..n-1 as writer jobA/table#0, one batch per key,
// so that every key's entries are a chunk of their own.
func writeKeys(t *testing.T, tbl *aggmerge.Table, n int, v int64) {
	t.Helper()
	for k := range n {
		b, err := tbl.NewBatch(aggmerge.Writer{ID: "jobA/table#0", Epoch: 100}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Upsert(aggmerge.Aggregate, []agg.Value{agg.IntValue(int64(k))}, []agg.Value{agg.IntValue(v)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
}

func decodeItem(t *testing.T, raw []byte) snapshotState {
	t.Helper()
	var s snapshotState
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func encodeItem(t *testing.T, s snapshotState) []byte {
	t.Helper()
	raw, err := s.encode()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// editItems applies edit to every decoded item and encodes them again.
func editItems(t *testing.T, items [][]byte, edit func(*snapshotState)) [][]byte {
	out := make([][]byte, len(items))
	for i, raw := range items {
		s := decodeItem(t, raw)
		edit(&s)
		out[i] = encodeItem(t, s)
	}
	return out
}

// wantRestoreError checks that err wraps runtime.ErrRestore and each of is,
// and that its message holds every fragment.
func wantRestoreError(t *testing.T, err error, is []error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("restore succeeded, want an error")
	}
	if !errors.Is(err, runtime.ErrRestore) {
		t.Errorf("error does not wrap runtime.ErrRestore: %v", err)
	}
	for _, e := range is {
		if !errors.Is(err, e) {
			t.Errorf("error does not wrap %q: %v", e, err)
		}
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error does not say %q: %v", f, err)
		}
	}
}

func TestRestoreBaselineBeyondLogEnd(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	writeKeys(t, tbl, 16, 1)
	items := snapshot(t, tbl, 1)
	ends := tbl.LogEnds()
	// The table lost writes the checkpoint saw (restored from an older copy).
	items = editItems(t, items, func(s *snapshotState) { s.Baselines[2] = ends[2] + 5 })
	_, err := openSink(tbl, 0, 1, items)
	wantRestoreError(t, err, []error{aggmerge.ErrBeyondLogEnd}, tbl.Dir(), "bucket 2",
		fmt.Sprintf("baseline %d, log end %d", ends[2]+5, ends[2]), "lost writes a checkpoint covers (corrupt")
}

func TestRestoreLogTruncatedBelowBaseline(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	writeKeys(t, tbl, 16, 1)
	items := snapshot(t, tbl, 2)
	base := tbl.LogEnds()
	writeKeys(t, tbl, 16, 1)
	_, end, err := tbl.LogOffsets(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Truncate(1, end); err != nil {
		t.Fatal(err)
	}
	start, _, err := tbl.LogOffsets(1)
	if err != nil {
		t.Fatal(err)
	}
	if start <= base[1] {
		t.Fatalf("truncate left the log of bucket 1 at %d, not above the baseline %d", start, base[1])
	}
	// Subtask 1 of 2 owns bucket 1.
	_, err = openSink(tbl, 1, 2, items)
	wantRestoreError(t, err, []error{aggmerge.ErrBelowLogStart}, tbl.Dir(), "bucket 1",
		fmt.Sprintf("baseline %d, log starts at %d", base[1], start))
}

func TestRestoreTableRecreated(t *testing.T) {
	dir := t.TempDir()
	old, err := aggmerge.Open(dir, sumSchema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeKeys(t, old, 16, 1)
	items := snapshot(t, old, 1)
	base, oldID := old.LogEnds(), old.ID()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	tbl := openSumTable(t, dir)
	writeKeys(t, tbl, 64, 1) // the new table's log is longer: only the id tells
	_, err = openSink(tbl, 0, 1, items)
	wantRestoreError(t, err, []error{ErrState}, dir, oldID.String(), tbl.ID().String(),
		fmt.Sprintf("bucket 3 at %d", base[3]))
}

func TestRestoreStateOfAnotherTable(t *testing.T) {
	other := openSumTable(t, t.TempDir())
	writeKeys(t, other, 16, 1)
	items := snapshot(t, other, 1)
	tbl := openSumTable(t, t.TempDir())
	writeKeys(t, tbl, 16, 1)
	_, err := openSink(tbl, 0, 1, items)
	wantRestoreError(t, err, []error{ErrState}, tbl.Dir(), other.Dir(), other.ID().String(), tbl.ID().String(),
		fmt.Sprintf("bucket 0 at %d", other.LogEnds()[0]))
}

func TestRestoreStateOfAnotherSink(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	writeKeys(t, tbl, 16, 1)
	items := editItems(t, snapshot(t, tbl, 1), func(s *snapshotState) { s.Sink = "jobB/table" })
	_, err := openSink(tbl, 0, 1, items)
	wantRestoreError(t, err, []error{ErrState}, tbl.Dir(), "jobB/table", "jobA/table",
		fmt.Sprintf("bucket 1 at %d", tbl.LogEnds()[1]))
}

func TestRestoreConflictingOffsets(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	writeKeys(t, tbl, 16, 1)
	items := snapshot(t, tbl, 2)
	ends := tbl.LogEnds()
	// Subtask 0 of 2 claims bucket 1 too, at another offset: two writers.
	items[0] = editItems(t, items[:1], func(s *snapshotState) { s.Baselines[1] = ends[1] - 1 })[0]
	_, err := openSink(tbl, 0, 2, items)
	wantRestoreError(t, err, []error{ErrState}, tbl.Dir(), "bucket 1",
		fmt.Sprintf("conflicting baselines %d (subtask 0) and %d (subtask 1)", ends[1]-1, ends[1]))
}

func TestRestoreBucketMissing(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	writeKeys(t, tbl, 16, 1)
	items := editItems(t, snapshot(t, tbl, 2), func(s *snapshotState) { delete(s.Baselines, 3) })
	_, err := openSink(tbl, 0, 3, items)
	wantRestoreError(t, err, []error{ErrState}, tbl.Dir(), "buckets [3] have no baseline")
	// A subtask item missing altogether leaves its buckets without baseline.
	_, err = openSink(tbl, 0, 1, snapshot(t, tbl, 2)[:1])
	wantRestoreError(t, err, []error{ErrState}, tbl.Dir(), "buckets [1 3] have no baseline")
}

// TestRestoreNoState: a checkpoint without the sink's state starts a sink
// new to the job afresh (it never wrote: nothing to undo), also once it
// registered and checkpointed, but refuses the restore once the sink's
// writer has written to the table: what it wrote past the checkpoint has
// no baseline to undo from.
func TestRestoreNoState(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	writeKeys(t, tbl, 4, 5)
	ends := tbl.LogEnds()
	s, err := openSink(tbl, 0, 1, [][]byte{})
	if err != nil {
		t.Fatalf("a sink new to the job: %v", err)
	}
	if got := tbl.LogEnds(); !slices.Equal(got, ends) {
		t.Fatalf("a new sink changed the log: ends %v, were %v", got, ends)
	}
	if row, ok, err := tbl.Get([]agg.Value{agg.IntValue(0)}); err != nil || !ok || row.Values[0].Int() != 5 {
		t.Fatalf("key 0 after a new sink opened: %v %v %v, want 5", row, ok, err)
	}
	if _, err := s.Snapshot(8); err != nil {
		t.Fatalf("the new sink's first checkpoint: %v", err)
	}
	if _, err = openSink(tbl, 0, 1, [][]byte{}); err != nil {
		t.Fatalf("a sink that registered but never wrote: %v", err)
	}
	writeKeys(t, tbl, 4, 5) // as the sink's writer, jobA/table#0
	_, err = openSink(tbl, 0, 1, [][]byte{})
	wantRestoreError(t, err, []error{ErrState}, tbl.Dir(), "sink jobA/table", "writer jobA/table#0",
		"no checkpoint committed", "the restored checkpoint 7 holds no state of the sink")
	var lost *LostStateError
	if !errors.As(err, &lost) || !slices.Equal(lost.Writers, []string{"jobA/table#0"}) {
		t.Fatalf("error %v is not a LostStateError of writer jobA/table#0", err)
	}
}

// TestRestoreErrorUndoesNothing checks that a failed restore leaves every
// row as it was: the checks come before any undo of any owned bucket.
func TestRestoreErrorUndoesNothing(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	writeKeys(t, tbl, 16, 1)
	items := snapshot(t, tbl, 1)
	writeKeys(t, tbl, 16, 1) // to be undone
	ends := tbl.LogEnds()
	items = editItems(t, items, func(s *snapshotState) { s.Baselines[testBuckets-1] = ends[testBuckets-1] + 1 })
	_, err := openSink(tbl, 0, 1, items)
	wantRestoreError(t, err, []error{aggmerge.ErrBeyondLogEnd}, fmt.Sprintf("bucket %d", testBuckets-1))
	if got := tbl.LogEnds(); fmt.Sprint(got) != fmt.Sprint(ends) {
		t.Fatalf("a failed restore wrote to the log: ends %v, were %v", got, ends)
	}
}

// TestSnapshotHoldsEveryOwnedBucket checks the complete baseline: a
// subtask saves every bucket it owns, changed since the last checkpoint or
// not, and nothing else.
func TestSnapshotHoldsEveryOwnedBucket(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	var sinks []*sink
	for i := range 3 {
		s, err := openSink(tbl, i, 3, nil)
		if err != nil {
			t.Fatal(err)
		}
		sinks = append(sinks, s)
	}
	check := func(id barrier.CheckpointID) {
		t.Helper()
		ends := tbl.LogEnds()
		for i, s := range sinks {
			st, err := s.Snapshot(id)
			if err != nil {
				t.Fatal(err)
			}
			item := decodeItem(t, st.Unions[stateList][0])
			want := map[int]uint64{}
			for b := range testBuckets {
				if Owner(b, 3) == i {
					want[b] = ends[b]
				}
			}
			if fmt.Sprint(item.Baselines) != fmt.Sprint(want) {
				t.Errorf("checkpoint %d subtask %d saved %v, want %v", id, i, item.Baselines, want)
			}
		}
	}
	check(0) // before any write: every owned bucket at 0
	writeKeys(t, tbl, 1, 1)
	check(1) // one bucket changed
}

func TestMergeBaselines(t *testing.T) {
	item := func(s snapshotState) []byte {
		s.Version, s.Table, s.TableID, s.Sink, s.Buckets = stateVersion, "t", "id1", "job/sink", 4
		return encodeItem(t, s)
	}
	t.Run("rescale", func(t *testing.T) {
		items := [][]byte{
			item(snapshotState{Subtask: 0, Baselines: map[int]uint64{0: 5, 2: 7}}),
			item(snapshotState{Subtask: 1, Baselines: map[int]uint64{1: 0, 3: 9}}),
		}
		got, err := mergeBaselines(items, "t", "id1", "job/sink", 4)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int]uint64{0: 5, 1: 0, 2: 7, 3: 9}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
	t.Run("same bucket same offset", func(t *testing.T) {
		// Two items agreeing on a bucket is not a conflict.
		items := [][]byte{
			item(snapshotState{Subtask: 0, Baselines: map[int]uint64{0: 5, 1: 6}}),
			item(snapshotState{Subtask: 1, Baselines: map[int]uint64{1: 6, 2: 1, 3: 2}}),
		}
		if _, err := mergeBaselines(items, "t", "id1", "job/sink", 4); err != nil {
			t.Fatal(err)
		}
	})
	for _, c := range []struct {
		name  string
		items [][]byte
		want  []string
	}{
		{"version", [][]byte{encodeItem(t, snapshotState{Version: 9, Table: "t", TableID: "id1", Sink: "job/sink", Buckets: 4,
			Baselines: map[int]uint64{0: 1, 1: 1, 2: 1, 3: 1}})}, []string{"version 9"}},
		{"bucket count", [][]byte{encodeItem(t, snapshotState{Version: stateVersion, Table: "t", TableID: "id1", Sink: "job/sink", Buckets: 8,
			Baselines: map[int]uint64{0: 1, 1: 1, 2: 1, 3: 1}})}, []string{"cover 8 buckets, the table has 4"}},
		{"out of range", [][]byte{item(snapshotState{Baselines: map[int]uint64{0: 1, 1: 1, 2: 1, 3: 1, 4: 1}})},
			[]string{"bucket 4: out of range [0, 4)"}},
		{"undecodable", [][]byte{[]byte("{")}, []string{"decode baseline"}},
		{"every error at once", [][]byte{
			item(snapshotState{Subtask: 0, Baselines: map[int]uint64{0: 1, 1: 2}}),
			item(snapshotState{Subtask: 1, Baselines: map[int]uint64{1: 3}}),
		}, []string{"bucket 1: conflicting baselines 2 (subtask 0) and 3 (subtask 1)", "buckets [2 3] have no baseline"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := mergeBaselines(c.items, "t", "id1", "job/sink", 4)
			if !errors.Is(err, ErrState) {
				t.Fatalf("got %v, want ErrState", err)
			}
			for _, w := range append(c.want, "table t") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q: %v", w, err)
				}
			}
		})
	}
}
