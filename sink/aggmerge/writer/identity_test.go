package writer_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// TestResetOnlyItsSink: one job writes a table through two sinks, "table"
// (the sums columns) and "table#n2" (column n2), whose writer ids are
// "sums/table#<i>" and "sums/table#n2#<i>". Resetting sink "table" takes
// back its columns and leaves the other sink's alone: a writer belongs to
// the sink its id names, not to every sink whose name starts like it.
func TestResetOnlyItsSink(t *testing.T) {
	tbl := openTable(t)
	j := runtime.NewJob(runtime.Options{Name: restoreJob, DataDir: t.TempDir(), Parallelism: 2, BatchSize: 256,
		Checkpoint: runtime.CheckpointOptions{Interval: 20 * time.Millisecond}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: lostCount, Rate: 40_000}))
	for name, cols := range map[string][]string{"table": sumsColumns, "table#n2": {"n2"}} {
		mapper := func(e operators.Event, r *writer.Row) error {
			if err := mapEvent(e, r); err != nil {
				return err
			}
			if len(cols) == 1 {
				r.Vals = r.Vals[len(r.Vals)-1:]
			} else {
				r.Vals = r.Vals[:len(cols)]
			}
			return nil
		}
		if err := writer.To(src, name, writer.Config{Table: tbl, Columns: cols, BatchSize: 100}, mapper); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := j.Run(ctx); err != nil {
		t.Fatal(err)
	}
	want := expected(lostCount)
	checkRows(t, tbl, want)
	for _, r := range tbl.Writers() { // as stored, the ids parse to their parts
		id, err := base.ParseWriterID(r.Writer)
		if err != nil || id.Job != restoreJob || id.Job != r.Job || (id.Sink != "table" && id.Sink != "table#n2") || id.Subtask > 1 {
			t.Errorf("registered writer %q of job %q: parsed %+v, %v", r.Writer, r.Job, id, err)
		}
	}

	res, err := writer.Reset(tbl, restoreJob, "table")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Writers, []string{"sums/table#0", "sums/table#1"}) {
		t.Errorf("reset took back the writes of %v, want sums/table#0 and #1 only", res.Writers)
	}
	onlyN2 := map[int64][]string{}
	for k, w := range want {
		onlyN2[k] = []string{"NULL", "NULL", "NULL", "NULL", "NULL", w[5]}
	}
	checkRowsNull(t, tbl, onlyN2)
	var epochs []string
	for _, r := range tbl.Writers() {
		if r.Writer == "sums/table#n2#0" || r.Writer == "sums/table#n2#1" {
			epochs = append(epochs, r.Writer)
			if r.Epoch != 1 || !r.Wrote {
				t.Errorf("writer %s of the other sink: epoch %d, wrote %v after the reset, want epoch 1 and its writes kept", r.Writer, r.Epoch, r.Wrote)
			}
		}
	}
	if len(epochs) != 2 {
		t.Errorf("registered writers of sink table#n2: %v, want both subtasks", epochs)
	}
}
