package writer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// The tests here restore real jobs with another parallelism or from an
// older checkpoint. Each restored run is held before its first write (the
// mapper waits) until every subtask has undone: the table must then equal
// its log replayed up to the restored baselines, and the progress the
// subtasks log must match the log; then the run finishes and the table must
// be the exact aggregate of the input.

const restoreJob = "sums"

// restoreRun is one run of sequence → writer "table".
type restoreRun struct {
	par      int
	count    uint64
	restore  runtime.RestorePoint
	interval time.Duration
	retain   int
	log      *writer.ProgressLog
	hold     *hold
	// during runs while the job runs and may stop or cancel it; it must
	// return once ctx is done.
	during func(ctx context.Context, j *runtime.Job, cancel context.CancelFunc)
}

func (r restoreRun) run(t *testing.T, tbl *aggmerge.Table, dataDir string) error {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	if r.log != nil {
		logger = slog.New(r.log)
	}
	j := runtime.NewJob(runtime.Options{Name: restoreJob, DataDir: dataDir, Parallelism: r.par, BatchSize: 256,
		Restore: r.restore, Logger: logger,
		Checkpoint: runtime.CheckpointOptions{Interval: r.interval, Retain: r.retain},
		Restart:    runtime.RestartOptions{MaxAttempts: -1}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: r.count, Rate: 40_000 / float64(r.par)}))
	mapper := mapEvent
	if r.hold != nil {
		mapper = func(e operators.Event, row *writer.Row) error {
			r.hold.wait()
			return mapEvent(e, row)
		}
	}
	if err := writer.To(src, "table", writer.Config{Table: tbl, BatchSize: 100}, mapper); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	if r.during != nil {
		wg.Go(func() { r.during(ctx, j, cancel) })
	}
	err := j.Run(ctx)
	cancel()
	wg.Wait()
	return err
}

// hold blocks the mapper (so every write) until released.
type hold struct {
	once    sync.Once
	release chan struct{}
}

func newHold(t *testing.T) *hold {
	h := &hold{release: make(chan struct{})}
	t.Cleanup(h.open) // never leave a job blocked
	return h
}

func (h *hold) wait() { <-h.release }
func (h *hold) open() { h.once.Do(func() { close(h.release) }) }

// baselinesAt reads the sink's baselines from checkpoint id of the job.
func baselinesAt(t *testing.T, dataDir string, id barrier.CheckpointID) map[int]uint64 {
	t.Helper()
	st, err := state.OpenStorage(filepath.Join(dataDir, "jobs", restoreJob, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := st.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	ops, _ := st.Restore(md, "table", 1, 0)
	base := map[int]uint64{}
	for _, raw := range ops.Unions[writer.StateList] {
		var item struct {
			Baselines map[int]uint64 `json:"baselines"`
		}
		if err := json.Unmarshal(raw, &item); err != nil {
			t.Fatal(err)
		}
		for b, off := range item.Baselines {
			base[b] = off
		}
	}
	return base
}

// pendingUndo computes from the log what undoing from base to the current
// ends must do: the entries in the ranges, and the distinct keys written in
// them (every writer of these tests is the sink).
func pendingUndo(t *testing.T, tbl *aggmerge.Table, base map[int]uint64) (entries, keys int64) {
	t.Helper()
	for b, end := range tbl.LogEnds() {
		seen := map[string]bool{}
		entries += int64(end - base[b])
		err := tbl.ReadLog(b, base[b], func(e *aggmerge.Entry) error {
			if e.Offset < end && e.Op != aggmerge.MarkerEntry {
				seen[fmt.Sprint(e.Key)] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		keys += int64(len(seen))
	}
	return entries, keys
}

// rowsAt replays every bucket's log up to its baseline: the table as the
// checkpoint saw it.
func rowsAt(t *testing.T, tbl *aggmerge.Table, base map[int]uint64) map[int64][]string {
	t.Helper()
	rows := map[int64][]string{}
	for b := range tbl.Schema().Buckets {
		err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
			if e.Offset >= base[b] {
				return nil
			}
			switch e.Op {
			case aggmerge.Insert, aggmerge.UpdateAfter:
				rows[e.Key[0].Int()] = format(e.After)
			case aggmerge.Delete:
				delete(rows, e.Key[0].Int())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return rows
}

func tableRows(tbl *aggmerge.Table) (map[int64][]string, error) {
	rows := map[int64][]string{}
	err := tbl.Scan(func(r aggmerge.Row) error {
		rows[r.Key[0].Int()] = format(r.Values)
		return nil
	})
	return rows, err
}

// restoreAndCheck restores the job at parallelism par from checkpoint id
// checks the table and the logged progress once every
// subtask has undone, then lets the run finish and checks the table exact.
func restoreAndCheck(t *testing.T, tbl *aggmerge.Table, dataDir string, par int, count uint64, id barrier.CheckpointID) {
	t.Helper()
	base := baselinesAt(t, dataDir, id)
	if len(base) != tbl.Schema().Buckets {
		t.Fatalf("checkpoint %d holds baselines of %d buckets, want %d", id, len(base), tbl.Schema().Buckets)
	}
	wantEntries, wantKeys := pendingUndo(t, tbl, base)
	if wantKeys == 0 {
		t.Fatalf("nothing was written past checkpoint %d: the test would prove nothing", id)
	}
	want := rowsAt(t, tbl, base)
	r := restoreRun{par: par, count: count, restore: runtime.RestoreCheckpoint(id), interval: 20 * time.Millisecond,
		log: writer.NewProgressLog(), hold: newHold(t)}
	// The held run is checked from its own goroutine, which must not stop
	// the test: it reports, the test goroutine fails.
	var progress writer.Progress
	var atUndo map[int64][]string
	var heldErr error
	r.during = func(ctx context.Context, _ *runtime.Job, _ context.CancelFunc) {
		defer r.hold.open()
		if progress, heldErr = r.log.WaitUndone(par); heldErr == nil {
			atUndo, heldErr = tableRows(tbl)
		}
	}
	err := r.run(t, tbl, dataDir)
	if heldErr != nil {
		t.Fatal(heldErr)
	}
	if err != nil {
		t.Fatalf("restored run: %v", err)
	}
	if fmt.Sprint(atUndo) != fmt.Sprint(want) {
		t.Errorf("after undo at parallelism %d the table differs from checkpoint %d's (%d rows, want %d)", par, id, len(atUndo), len(want))
	}
	p := progress
	if p.Buckets != int64(tbl.Schema().Buckets) || p.Scanned != wantEntries || p.Restored != wantKeys {
		t.Errorf("undo progress: %d buckets, %d entries scanned, %d keys restored; want %d, %d, %d",
			p.Buckets, p.Scanned, p.Restored, tbl.Schema().Buckets, wantEntries, wantKeys)
	}
	t.Logf("restored checkpoint %d at parallelism %d: %d entries scanned, %d keys restored", id, par, p.Scanned, p.Restored)
	checkTable(t, tbl, expected(count))
}

// crashAfterWrites runs the job at parallelism par from the latest
// checkpoint without periodic checkpoints, and cancels it once at least n
// more log entries were written: writes past the checkpoint, to undo.
func crashAfterWrites(t *testing.T, tbl *aggmerge.Table, dataDir string, par int, count uint64, n uint64) {
	t.Helper()
	total := func() (s uint64) {
		for _, e := range tbl.LogEnds() {
			s += e
		}
		return s
	}
	start := total()
	r := restoreRun{par: par, count: count}
	r.during = func(ctx context.Context, _ *runtime.Job, cancel context.CancelFunc) {
		for total() < start+n {
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
		cancel()
	}
	if err := r.run(t, tbl, dataDir); err != context.Canceled {
		t.Fatalf("the crashed run returned %v, want it cancelled", err)
	}
}

// TestRescaleUndo: a job at parallelism 2 stops with a checkpoint, runs on
// and crashes past it; restored at 3 or 1, each new owner undoes its buckets
// from the baselines parallelism 2 recorded.
func TestRescaleUndo(t *testing.T) {
	const count = 40_000 // the crashed run must have 200 entries' worth of input left
	for _, to := range []int{3, 1} {
		t.Run(fmt.Sprintf("2to%d", to), func(t *testing.T) {
			tbl, dataDir := openTable(t), t.TempDir()
			first := restoreRun{par: 2, count: count, interval: 20 * time.Millisecond}
			first.during = func(ctx context.Context, j *runtime.Job, _ context.CancelFunc) {
				select {
				case <-ctx.Done():
				case <-time.After(150 * time.Millisecond):
					j.Stop()
				}
			}
			if err := first.run(t, tbl, dataDir); err != nil {
				t.Fatal(err)
			}
			crashAfterWrites(t, tbl, dataDir, 2, count, 200)
			ids := completedCheckpoints(t, dataDir)
			restoreAndCheck(t, tbl, dataDir, to, count, ids[len(ids)-1])
		})
	}
}

// TestRestoreOlderCheckpoint: a job runs to its end through several
// checkpoints; restoring an older retained one undoes everything written
// after it, also what later checkpoints covered, and the replay from its
// source positions makes the table exact again.
func TestRestoreOlderCheckpoint(t *testing.T) {
	const count = 20_000
	tbl, dataDir := openTable(t), t.TempDir()
	first := restoreRun{par: 2, count: count, interval: 20 * time.Millisecond, retain: 100}
	if err := first.run(t, tbl, dataDir); err != nil {
		t.Fatal(err)
	}
	checkTable(t, tbl, expected(count))
	completed := completedCheckpoints(t, dataDir)
	if len(completed) < 4 {
		t.Fatalf("only checkpoints %v completed; want several", completed)
	}
	older := completed[len(completed)/2]
	t.Logf("checkpoints %v; restoring %d", completed, older)
	restoreAndCheck(t, tbl, dataDir, 2, count, older)
}

// TestRestoreEarliestCheckpoint restores, at another parallelism, the
// first checkpoint of a job that ran to its end, taken before any record:
// every write is undone, then the replay of the input writes it again.
func TestRestoreEarliestCheckpoint(t *testing.T) {
	const count = 5_000
	tbl, dataDir := openTable(t), t.TempDir()
	first := restoreRun{par: 2, count: count, interval: 20 * time.Millisecond, retain: 1000}
	if err := first.run(t, tbl, dataDir); err != nil {
		t.Fatal(err)
	}
	initial := completedCheckpoints(t, dataDir)[0]
	// It was taken before any record: every bucket at 0.
	for b, off := range baselinesAt(t, dataDir, initial) {
		if off != 0 {
			t.Fatalf("first checkpoint %d: bucket %d at %d, want every bucket at 0", initial, b, off)
		}
	}
	restoreAndCheck(t, tbl, dataDir, 3, count, initial)
}

func completedCheckpoints(t *testing.T, dataDir string) []barrier.CheckpointID {
	t.Helper()
	st, err := state.OpenStorage(filepath.Join(dataDir, "jobs", restoreJob, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	cps, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []barrier.CheckpointID
	for _, c := range cps {
		if c.Completed {
			ids = append(ids, c.ID)
		}
	}
	return ids
}
