package writer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// sumsColumns are the columns job "sums" writes; job "other" writes n2.
var sumsColumns = []string{"total", "n", "top", "last", "seqs"}

// runColumns runs job name (sequence → writer "table" of cols) to the end
// of its bounded input and returns the run's error.
func runColumns(t *testing.T, tbl *aggmerge.Table, name, dataDir string, par int, restore runtime.RestorePoint, cols []string) error {
	t.Helper()
	j := runtime.NewJob(runtime.Options{Name: name, DataDir: dataDir, Parallelism: par, BatchSize: 256, Restore: restore,
		Checkpoint: runtime.CheckpointOptions{Interval: 20 * time.Millisecond}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: lostCount, Rate: 40_000}))
	mapper := func(e operators.Event, r *writer.Row) error {
		if err := mapEvent(e, r); err != nil {
			return err
		}
		if len(cols) == 1 { // n2, the last column
			r.Vals = r.Vals[len(r.Vals)-1:]
		} else {
			r.Vals = r.Vals[:len(cols)]
		}
		return nil
	}
	if err := writer.To(src, "table", writer.Config{Table: tbl, Columns: cols, BatchSize: 100, TruncateLog: true}, mapper); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return j.Run(ctx)
}

const lostCount = 5_000

// TestLostStateRefusedThenReset: job "sums" ran to its end and wrote its
// columns; job "other" wrote another column of the same rows. Started
// again without its state (a new data directory, or RestoreNone), "sums"
// is refused, naming the table, its writers and their last committed
// checkpoint, and the table is left as it was. Reset takes back everything
// "sums" wrote (its log truncated meanwhile) and keeps "other"'s column;
// then "sums" starts afresh, at another parallelism, and the table is the
// input counted once.
func TestLostStateRefusedThenReset(t *testing.T) {
	tbl := openTable(t)
	if err := runColumns(t, tbl, "other", t.TempDir(), 1, runtime.RestoreLatest, []string{"n2"}); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	if err := runColumns(t, tbl, restoreJob, dataDir, 2, runtime.RestoreLatest, sumsColumns); err != nil {
		t.Fatal(err)
	}
	want := expected(lostCount)
	checkRows(t, tbl, want)
	ids := completedCheckpoints(t, dataDir)
	last := ids[len(ids)-1]
	if start, _, _ := tbl.LogOffsets(0); start == 0 {
		t.Fatalf("the log of bucket 0 was not truncated: the reset would not be shown to work without it")
	}
	ends := tbl.LogEnds()

	for name, run := range map[string]func() error{
		"new data directory": func() error {
			return runColumns(t, tbl, restoreJob, t.TempDir(), 2, runtime.RestoreLatest, sumsColumns)
		},
		"RestoreNone": func() error { return runColumns(t, tbl, restoreJob, dataDir, 2, runtime.RestoreNone, sumsColumns) },
	} {
		err := run()
		var lost *writer.LostStateError
		if !errors.Is(err, runtime.ErrRestore) || !errors.Is(err, writer.ErrState) || !errors.As(err, &lost) {
			t.Fatalf("%s: %v, want a LostStateError (restore failed, state not restorable)", name, err)
		}
		for _, f := range []string{tbl.Dir(), "sink sums/table", "sums/table#0, sums/table#1",
			fmt.Sprintf("last committed checkpoint %d", last), "starts afresh", "reset the sink"} {
			if !strings.Contains(err.Error(), f) {
				t.Errorf("%s: the refusal does not say %q: %v", name, f, err)
			}
		}
		if !lost.Committed || lost.Checkpoint != uint64(last) {
			t.Errorf("%s: refusal names checkpoint %d (committed %v), want %d", name, lost.Checkpoint, lost.Committed, last)
		}
		if got := tbl.LogEnds(); !slices.Equal(got, ends) {
			t.Fatalf("%s: the refused start wrote to the table: log ends %v, were %v", name, got, ends)
		}
	}

	res, err := writer.Reset(tbl, restoreJob, "table")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Writers, []string{"sums/table#0", "sums/table#1"}) || res.Rows != keys {
		t.Fatalf("reset %+v, want writers sums/table#0 and #1 and %d rows", res, keys)
	}
	onlyOther := map[int64][]string{}
	for k, w := range want {
		onlyOther[k] = []string{"NULL", "NULL", "NULL", "NULL", "NULL", w[5]}
	}
	checkRowsNull(t, tbl, onlyOther)
	// Idempotent: again, it changes no row.
	if _, err := writer.Reset(tbl, restoreJob, "table"); err != nil {
		t.Fatal(err)
	}
	checkRowsNull(t, tbl, onlyOther)

	if err := runColumns(t, tbl, restoreJob, dataDir, 3, runtime.RestoreNone, sumsColumns); err != nil {
		t.Fatalf("the run after the reset: %v", err)
	}
	checkRows(t, tbl, want) // (the log is truncated: no replay from 0)
}

// checkRowsNull compares the table with want, a missing value shown as
// NULL.
func checkRowsNull(t *testing.T, tbl *aggmerge.Table, want map[int64][]string) {
	t.Helper()
	got := map[int64][]string{}
	err := tbl.Scan(func(r aggmerge.Row) error {
		row := format(r.Values)
		for i, v := range r.Values {
			if v.IsNull() {
				row[i] = "NULL"
			}
		}
		got[r.Key[0].Int()] = row
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		const k = 0
		t.Fatalf("table after the reset: %d rows, want %d; key %d: %v, want %v", len(got), len(want), k, got[k], want[k])
	}
}
