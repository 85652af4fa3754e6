package writer_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// TestLogRetention: with TruncateLog the log is cut, yet the oldest retained
// checkpoint stays restorable, and restoring it ends with the exact table.
func TestLogRetention(t *testing.T) {
	const count = 30_000
	tbl := openTable(t)
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	run := func(rp runtime.RestorePoint) {
		j := runtime.NewJob(runtime.Options{Name: "retain", DataDir: dir, Parallelism: 2, Restore: rp, Registerer: reg,
			Checkpoint: runtime.CheckpointOptions{Interval: 20 * time.Millisecond, Retain: 2}})
		src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: count, Rate: 20_000}))
		if err := writer.To(src, "table", writer.Config{Table: tbl, TruncateLog: true, NoCombine: true, FlushInterval: 5 * time.Millisecond}, mapEvent); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := j.Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run(runtime.RestoreLatest)
	checkRows(t, tbl, expected(count))
	truncated := false
	for b := 0; b < tbl.Schema().Buckets; b++ {
		if start, _, _ := tbl.LogOffsets(b); start > 0 {
			truncated = true
		}
	}
	if !truncated {
		t.Fatal("no bucket's log was truncated")
	}
	s, err := state.OpenStorage(filepath.Join(dir, "jobs", "retain", "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	cps, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var oldest *state.Checkpoint
	for i := range cps {
		if cps[i].Completed {
			oldest = &cps[i]
			break
		}
	}
	if oldest == nil {
		t.Fatal("no retained checkpoint")
	}
	reg = prometheus.NewRegistry()
	run(runtime.RestoreCheckpoint(oldest.ID))
	checkRows(t, tbl, expected(count))
	// The restore's undo is published by each of the two subtasks.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	for _, name := range []string{"ebbflow_sink_undo_entries_scanned", "ebbflow_sink_undo_keys_restored", "ebbflow_sink_undo_duration_seconds"} {
		if series[name] != 2 {
			t.Errorf("%s: %d series after a restore at parallelism 2, want 2", name, series[name])
		}
	}
}
