package export

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// twoColumns is a table that two jobs write: job A column a, job B column b.
func twoColumns(t testing.TB) *aggmerge.Table {
	t.Helper()
	tbl, err := aggmerge.Open(t.TempDir(), aggmerge.Schema{
		Key:     []aggmerge.Column{{Name: "k", Type: agg.Int64}},
		Values:  []aggmerge.Column{{Name: "a", Type: agg.Int64, Func: "sum"}, {Name: "b", Type: agg.Int64, Func: "sum"}},
		Buckets: 1,
	}, aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}

// scriptWriter writes like the exactly-once writer: as "<job>/sink#0" on
// one column, with commit markers, undo entries and rollback markers.
type scriptWriter struct {
	t      testing.TB
	tbl    *aggmerge.Table
	w      aggmerge.Writer
	col    string
	commit uint64 // where the last commit marker ended
}

func newScriptWriter(t testing.TB, tbl *aggmerge.Table, job, col string) *scriptWriter {
	id := job + "/sink#0"
	epoch, err := tbl.Register(job, id, []string{col})
	if err != nil {
		t.Fatal(err)
	}
	return &scriptWriter{t: t, tbl: tbl, w: aggmerge.Writer{ID: id, Epoch: epoch}, col: col}
}

func (s *scriptWriter) batch(undo bool) *aggmerge.Batch {
	b, err := s.tbl.NewBatch(s.w, []string{s.col})
	if err != nil {
		s.t.Fatal(err)
	}
	b.SetUndo(undo)
	return b
}

func (s *scriptWriter) apply(b *aggmerge.Batch) {
	if _, err := s.tbl.Apply(b); err != nil {
		s.t.Fatal(err)
	}
}

// add aggregates v into key k.
func (s *scriptWriter) add(k, v int64) {
	b := s.batch(false)
	if err := b.Upsert(aggmerge.Aggregate, []agg.Value{agg.IntValue(k)}, []agg.Value{agg.IntValue(v)}); err != nil {
		s.t.Fatal(err)
	}
	s.apply(b)
}

// clear clears the writer's column of key k: a row with no other column
// set is deleted.
func (s *scriptWriter) clear(k int64) {
	b := s.batch(false)
	if err := b.Upsert(aggmerge.Overwrite, []agg.Value{agg.IntValue(k)}, []agg.Value{{}}); err != nil {
		s.t.Fatal(err)
	}
	s.apply(b)
}

func (s *scriptWriter) end() uint64 { return s.tbl.LogEnds()[0] }

// checkpoint appends the commit marker of checkpoint id up to the log end.
func (s *scriptWriter) checkpoint(id uint64) uint64 {
	to := s.end()
	b := s.batch(false)
	if err := b.Mark(0, aggmerge.Marker{Kind: aggmerge.MarkerCommit, Checkpoint: id, From: s.commit, To: to}); err != nil {
		s.t.Fatal(err)
	}
	s.apply(b)
	s.commit = to
	return to
}

// restore re-registers (a new epoch) and undoes everything past base,
// restoring the given values (nil: clear), then marks the rollback and the
// restored checkpoint, as writer.recover does.
func (s *scriptWriter) restore(id, base uint64, restore map[int64]*int64) {
	s.register()
	end := s.end()
	b := s.batch(true)
	keys := make([]int64, 0, len(restore))
	for k := range restore {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := agg.Value{}
		if restore[k] != nil {
			v = agg.IntValue(*restore[k])
		}
		if err := b.Upsert(aggmerge.Overwrite, []agg.Value{agg.IntValue(k)}, []agg.Value{v}); err != nil {
			s.t.Fatal(err)
		}
	}
	if err := b.Mark(0, aggmerge.Marker{Kind: aggmerge.MarkerRollback, Checkpoint: id, From: base, To: end}); err != nil {
		s.t.Fatal(err)
	}
	s.apply(b)
	s.restored(id, base)
}

// skipRestore re-registers and marks the restored checkpoint without
// undoing, as writer.recover does for a sink that skips undo.
func (s *scriptWriter) skipRestore(id, base uint64) {
	s.register()
	s.restored(id, base)
}

// register registers again, for a new epoch.
func (s *scriptWriter) register() {
	epoch, err := s.tbl.Register(strings.SplitN(s.w.ID, "/", 2)[0], s.w.ID, []string{s.col})
	if err != nil {
		s.t.Fatal(err)
	}
	s.w.Epoch = epoch
}

// restored appends the restore's commit marker: the empty range at base.
func (s *scriptWriter) restored(id, base uint64) {
	m := s.batch(false)
	if err := m.Mark(0, aggmerge.Marker{Kind: aggmerge.MarkerCommit, Checkpoint: id, From: base, To: base}); err != nil {
		s.t.Fatal(err)
	}
	s.apply(m)
	s.commit = base
}

func ptr(v int64) *int64 { return &v }

// selectAll runs committed selection on bucket 0 to the log end, budget
// records per call, restarting the cursor from the last change's headers
// after every call when restart is set (as after an exporter crash).
func selectAll(t testing.TB, tbl *aggmerge.Table, c *cursor, budget int, restart bool) []string {
	t.Helper()
	var out []string
	for range 10_000 {
		end := tbl.LogEnds()[0]
		before := c.done
		chs, err := committedChanges(tbl, c, end, budget)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chs {
			out = append(out, show(ch))
		}
		if restart && len(chs) > 0 {
			last := chs[len(chs)-1]
			*c = cursor{done: last.offset + 1, resume: last.resume}
		}
		if len(chs) == 0 && c.done == before {
			return out
		}
	}
	t.Fatal("selection does not settle")
	return nil
}

func show(c change) string {
	img := func(v []agg.Value) string {
		if v == nil {
			return "-"
		}
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = "null"
			if !x.IsNull() {
				parts[i] = x.String()
			}
		}
		return strings.Join(parts, ",")
	}
	s := fmt.Sprintf("%d %s k=%s %s>%s", c.offset, c.op, c.key[0], img(c.before), img(c.after))
	if c.undo {
		s += " undo"
	}
	return s
}

// check selects the whole log at once (one range: a change per key) and
// compares with want. Then it selects again restarting from the last
// record's headers after every transaction, first with one key per
// transaction, then with the whole log per transaction, as after exporter
// crashes: the ranges differ, so the changes do, but each selection must
// chain (replayChanges) and give the same rows, those of the table when
// nothing is left undecided.
func check(t *testing.T, tbl *aggmerge.Table, want ...string) {
	t.Helper()
	c := &cursor{}
	got := selectAll(t, tbl, c, 1000, false)
	if !slices.Equal(got, want) {
		t.Fatalf("selected:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	var rows map[int64][]agg.Value
	if c.blocked == "" {
		rows = committedRows(t, tbl)
	}
	for _, budget := range []int{1000, 1} {
		var chs []change
		c := &cursor{}
		for range 10_000 {
			before := c.done
			more, err := committedChanges(tbl, c, tbl.LogEnds()[0], budget)
			if err != nil {
				t.Fatal(err)
			}
			chs = append(chs, more...)
			if len(more) > 0 {
				last := more[len(more)-1]
				*c = cursor{done: last.offset + 1, resume: last.resume}
			}
			if len(more) == 0 && c.done == before {
				break
			}
		}
		applied, err := replayChanges(chs, rows)
		if err != nil {
			t.Fatalf("restarting after every transaction of %d keys: %v\nselected:\n  %s", budget, err, strings.Join(shows(chs), "\n  "))
		}
		rows = applied
	}
}

func shows(chs []change) []string {
	out := make([]string, len(chs))
	for i, ch := range chs {
		out[i] = show(ch)
	}
	return out
}

// replayChanges applies chs in order as a consumer does, checking that
// every change starts from the row applied so far and that the log offsets
// of a key rise, and compares the result with want unless it is nil.
func replayChanges(chs []change, want map[int64][]agg.Value) (map[int64][]agg.Value, error) {
	rows := map[int64][]agg.Value{}
	last := map[int64]uint64{}
	for _, ch := range chs {
		k := ch.key[0].Int()
		if prev, ok := last[k]; ok && ch.offset <= prev {
			return nil, fmt.Errorf("%s: log offset %d after %d", show(ch), ch.offset, prev)
		}
		last[k] = ch.offset
		if row := rows[k]; !sameShown(ch.before, row) {
			return nil, fmt.Errorf("%s: the row is %v", show(ch), row)
		}
		if ch.after == nil {
			delete(rows, k)
		} else {
			rows[k] = ch.after
		}
	}
	if want == nil {
		return rows, nil
	}
	for k, w := range want {
		if !sameShown(rows[k], w) {
			return nil, fmt.Errorf("key %d: applied changes give %v, expected %v", k, rows[k], w)
		}
	}
	for k, r := range rows {
		if _, ok := want[k]; !ok && !sameShown(r, nil) {
			return nil, fmt.Errorf("key %d: applied changes give %v, expected no row", k, r)
		}
	}
	return rows, nil
}

// sameShown compares rows as a consumer can tell them apart, with one
// known limit: while a writer's rolled-back write is masked, a row whose
// columns all show null may be shown as no row, or the other way round
// (see mask.project).
func sameShown(a, b []agg.Value) bool {
	if !anyPresent(a) && !anyPresent(b) {
		return true
	}
	return sameRow(a, b)
}

// committedRows is the table's rows: in the tests that use it every writer
// has committed or rolled back everything.
func committedRows(t testing.TB, tbl *aggmerge.Table) map[int64][]agg.Value {
	t.Helper()
	rows := map[int64][]agg.Value{}
	err := tbl.Scan(func(r aggmerge.Row) error {
		rows[r.Key[0].Int()] = slices.Clone(r.Values)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// stepper selects round after round with one cursor, as an exporter does.
type stepper struct {
	t   *testing.T
	tbl *aggmerge.Table
	c   cursor
}

// next selects what is decided and compares with want.
func (s *stepper) next(want ...string) {
	s.t.Helper()
	got := selectAll(s.t, s.tbl, &s.c, 1000, false)
	if !slices.Equal(got, want) {
		s.t.Fatalf("selected:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestCommittedExportsOnlyCovered(t *testing.T) {
	tbl := twoColumns(t)
	a := newScriptWriter(t, tbl, "A", "a")
	a.add(1, 10)    // 0 +I
	a.add(1, 5)     // 1 -U, 2 +U
	a.checkpoint(1) // 3 marker: covers [0, 3)
	a.add(2, 7)     // 4 +I, not covered
	check(t, tbl, "2 +I k=1 ->15,null")
}

// TestCommittedFoldsARange: the changes of one range come as one change
// per key, at the offset of its last change, except that a deleted row
// shows its last image before the deletion; values set and set back within
// the range do not appear, and a restart after the range does not read
// their last change alone.
func TestCommittedFoldsARange(t *testing.T) {
	tbl := twoColumns(t)
	a := newScriptWriter(t, tbl, "A", "a")
	s := &stepper{t: t, tbl: tbl}
	a.add(1, 10)    // 0 +I
	a.add(2, 1)     // 1 +I
	a.add(1, 5)     // 2 -U, 3 +U
	a.clear(2)      // 4 -D
	a.add(2, 3)     // 5 +I
	a.checkpoint(1) // 6
	s.next("1 +I k=2 ->1,null", "3 +I k=1 ->15,null", "4 -D k=2 1,null>-", "5 +I k=2 ->3,null")
	a.add(2, 5)     // 7, 8
	a.add(1, 1)     // 9, 10
	a.add(3, 3)     // 11
	a.add(1, 1)     // 12, 13
	a.add(2, -5)    // 14, 15: key 2 back to 3
	a.checkpoint(2) // 16
	// The record of key 1 carries offset 15 (key 2's last change), so that
	// a restart after it reads on from 16, not from key 2's 8 -> 3 alone.
	s.next("11 +I k=3 ->3,null", "15 +U k=1 15,null>17,null")
	// Restarted from that record's headers, nothing is left to export.
	c := &cursor{done: 6 + 1}
	chs, err := committedChanges(tbl, c, tbl.LogEnds()[0], 1000)
	if err != nil || len(chs) != 2 {
		t.Fatalf("second range: %v, %v", shows(chs), err)
	}
	last := chs[len(chs)-1]
	c = &cursor{done: last.offset + 1, resume: last.resume}
	if again := selectAll(t, tbl, c, 1000, false); len(again) > 0 {
		t.Fatalf("restarted after %s (resume %d), selected again: %v", show(last), last.resume, again)
	}
	check(t, tbl, "1 +I k=2 ->1,null", "4 -D k=2 1,null>-", "11 +I k=3 ->3,null", "13 +I k=1 ->17,null", "15 +I k=2 ->3,null")
}

// TestCommittedRangesFollowCheckpoints: selected after each checkpoint,
// the ranges are the checkpoints.
func TestCommittedRangesFollowCheckpoints(t *testing.T) {
	tbl := twoColumns(t)
	a := newScriptWriter(t, tbl, "A", "a")
	s := &stepper{t: t, tbl: tbl}
	a.add(1, 10) // 0
	a.add(2, 1)  // 1
	a.add(1, 5)  // 2, 3
	s.next()
	a.checkpoint(1) // 4
	s.next("1 +I k=2 ->1,null", "3 +I k=1 ->15,null")
	a.add(1, 1) // 5, 6
	a.add(2, 1) // 7, 8
	a.add(1, 1) // 9, 10
	a.clear(2)  // 11
	s.next()
	a.checkpoint(2) // 12
	s.next("8 +U k=2 1,null>2,null", "10 +U k=1 15,null>17,null", "11 -D k=2 2,null>-")
}

// TestCommittedSkippedUndo: a sink that skips undo leaves the crashed run's
// writes past the baseline in the log; they wait, neither committed nor
// rolled back, until the first checkpoint after the restore covers them,
// and are then exported in log order, before the replay's writes.
func TestCommittedSkippedUndo(t *testing.T) {
	tbl := twoColumns(t)
	a := newScriptWriter(t, tbl, "A", "a")
	a.add(1, 10)            // 0 +I
	base := a.checkpoint(1) // 1 covers [0, 1)
	a.add(1, 5)             // 2 -U, 3 +U: the crashed run's
	a.skipRestore(1, base)  // 4 covers [1, 1)
	s := &stepper{t: t, tbl: tbl}
	s.next("0 +I k=1 ->10,null")
	a.add(2, 7)     // 5 +I: the replay, past what the crashed run wrote
	a.checkpoint(2) // 6 covers [1, 6)
	s.next("3 +U k=1 10,null>15,null", "5 +I k=2 ->7,null")
	check(t, tbl, "3 +I k=1 ->15,null", "5 +I k=2 ->7,null")
}

func TestCommittedSkipsRolledBackWrites(t *testing.T) {
	tbl := twoColumns(t)
	a := newScriptWriter(t, tbl, "A", "a")
	a.add(1, 10)            // 0
	base := a.checkpoint(1) // 1 covers [0, 1)
	a.add(1, 5)             // 2, 3: undone
	a.add(2, 7)             // 4: undone
	a.restore(1, base, map[int64]*int64{1: ptr(10), 2: nil})
	a.add(2, 1) // new epoch
	a.checkpoint(2)
	check(t, tbl, "0 +I k=1 ->10,null", "10 +I k=2 ->1,null")
}

// TestCommittedMasksUndoneValuesOfOtherWriters: job B's uncommitted b=5 is
// in the images of job A's committed write; B's rollback must keep the
// consumer from ever seeing b=5.
func TestCommittedMasksUndoneValuesOfOtherWriters(t *testing.T) {
	tbl := twoColumns(t)
	a := newScriptWriter(t, tbl, "A", "a")
	b := newScriptWriter(t, tbl, "B", "b")
	b.add(1, 5) // 0 +I {b=5}: will be undone
	a.add(1, 1) // 1, 2: {a=1, b=5}
	a.add(3, 3) // 3 +I
	a.checkpoint(1)
	// Held back: B's entry 0 is undecided and comes first.
	if got := selectAll(t, tbl, &cursor{}, 1000, false); len(got) != 0 {
		t.Fatalf("exported past an undecided entry: %v", got)
	}
	b.restore(0, 0, map[int64]*int64{1: nil}) // 5 undo {a=1}, 6 rollback [0, 5)
	check(t, tbl, "2 +I k=1 ->1,null", "3 +I k=3 ->3,null")
}

// TestCommittedHoldsBackUntilDecided: B's committed entry is exported only
// after it, with A's values in its images as committed.
func TestCommittedHoldsBackUntilDecided(t *testing.T) {
	tbl := twoColumns(t)
	a := newScriptWriter(t, tbl, "A", "a")
	b := newScriptWriter(t, tbl, "B", "b")
	a.add(1, 1)     // 0
	b.add(1, 2)     // 1, 2
	b.checkpoint(7) // 3
	s := &stepper{t: t, tbl: tbl}
	s.next()
	a.checkpoint(4) // 4
	s.next("2 +I k=1 ->1,2")
}

// TestCommittedRestoreOlderCheckpoint: restoring checkpoint 1 on purpose
// after checkpoint 2 was committed undoes values a consumer already saw:
// the undo is exported as an ordinary update, flagged undo.
func TestCommittedRestoreOlderCheckpoint(t *testing.T) {
	tbl := twoColumns(t)
	a := newScriptWriter(t, tbl, "A", "a")
	s := &stepper{t: t, tbl: tbl}
	a.add(1, 10)             // 0
	base1 := a.checkpoint(1) // 1
	s.next("0 +I k=1 ->10,null")
	a.add(1, 5)     // 2, 3
	a.checkpoint(2) // 4
	s.next("3 +U k=1 10,null>15,null")
	a.add(1, 100) // 5, 6: never committed
	a.restore(1, base1, map[int64]*int64{1: ptr(10)})
	s.next("8 +U k=1 15,null>10,null undo")
	check(t, tbl, "8 +I k=1 ->10,null undo")
}

func TestCommittedUnregisteredWriterIsFinal(t *testing.T) {
	tbl := twoColumns(t)
	b, err := tbl.NewBatch(aggmerge.Writer{ID: "plain"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Upsert(aggmerge.Aggregate, []agg.Value{agg.IntValue(1)}, []agg.Value{agg.IntValue(1), agg.IntValue(2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Apply(b); err != nil {
		t.Fatal(err)
	}
	check(t, tbl, "0 +I k=1 ->1,2")
}

func TestUncommittedExportsEverything(t *testing.T) {
	tbl := twoColumns(t)
	a := newScriptWriter(t, tbl, "A", "a")
	a.add(1, 10)
	base := a.checkpoint(1)
	a.add(1, 5)
	a.restore(1, base, map[int64]*int64{1: ptr(10)})
	c := &cursor{}
	chs, err := uncommittedChanges(tbl, c, tbl.LogEnds()[0], 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range chs {
		got = append(got, show(ch))
	}
	want := []string{"0 +I k=1 ->10,null", "3 +U k=1 10,null>15,null", "5 +U k=1 15,null>10,null undo"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if c.done != tbl.LogEnds()[0] || c.resume != c.done {
		t.Fatalf("cursor %+v, log end %d", c, tbl.LogEnds()[0])
	}
}

// committedChanges is selectCommitted collecting copies of the changes.
func committedChanges(t *aggmerge.Table, c *cursor, end uint64, budget int) ([]change, error) {
	var out []change
	err := selectCommitted(t, c, end, budget, newFold(t), collect(&out))
	return out, err
}

// uncommittedChanges is selectUncommitted collecting copies of the changes.
func uncommittedChanges(t *aggmerge.Table, c *cursor, end uint64, budget int) ([]change, error) {
	var out []change
	err := selectUncommitted(t, c, end, budget, collect(&out))
	return out, err
}

// collect returns an emit that appends a copy of each change to out: the
// slices of an emitted change are valid only during the call.
func collect(out *[]change) func(*change) error {
	return func(ch *change) error {
		c := *ch
		c.key, c.before, c.after = slices.Clone(c.key), slices.Clone(c.before), slices.Clone(c.after)
		*out = append(*out, c)
		return nil
	}
}
