package writer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// failInitial passes records through and, on the job's first attempt,
// fails its first snapshot: the initial checkpoint never completes.
type failInitial struct{ attempt int }

func (f *failInitial) Open(ctx *runtime.Context) error { f.attempt = ctx.Attempt; return nil }
func (f *failInitial) ProcessBatch(in []operators.Event, out *runtime.Collector[operators.Event]) error {
	for _, e := range in {
		out.Emit(e)
	}
	return nil
}
func (f *failInitial) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	if f.attempt > 0 {
		return state.OperatorState{}, nil
	}
	// Leave the sink time to write whatever reached it before the barrier.
	time.Sleep(50 * time.Millisecond)
	return state.OperatorState{}, errors.New("the initial checkpoint fails")
}
func (f *failInitial) NotifyComplete(barrier.CheckpointID) error { return nil }
func (f *failInitial) Close() error                              { return nil }

// TestInitialCheckpointFails: the first attempt fails before its initial
// checkpoint completed, so the restart is a fresh start with nothing to
// undo from; the sink must not have written anything by then (checkpoint 0
// precedes every record), or the replay counts it twice. It failed, every
// key wrong, while sources could read before the initial trigger.
func TestInitialCheckpointFails(t *testing.T) {
	const count = 20_000
	tbl := openTable(t)
	j := runtime.NewJob(runtime.Options{Name: "sums", DataDir: t.TempDir(), BatchSize: 64,
		Restart: runtime.RestartOptions{MaxAttempts: 3, InitialBackoff: time.Millisecond}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: count}))
	mid := runtime.Apply(src, "fail", func() runtime.Operator[operators.Event, operators.Event] { return &failInitial{} })
	// Without combining and one write per batch, every record the sink
	// sees is in the table at once.
	if err := writer.To(mid, "table", writer.Config{Table: tbl, BatchSize: 1, NoCombine: true}, mapEvent); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := j.Run(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, tbl, expected(count))
}
