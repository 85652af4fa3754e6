package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// countingOp counts the records each of its subtasks receives.
type countingOp struct {
	counts  []atomic.Int64
	subtask int
}

func (o *countingOp) Open(ctx *runtime.Context) error { o.subtask = ctx.Subtask; return nil }
func (o *countingOp) ProcessBatch(in []operators.Event, out *runtime.Collector[operators.Event]) error {
	o.counts[o.subtask].Add(int64(len(in)))
	for _, e := range in {
		out.Emit(e)
	}
	return nil
}
func (o *countingOp) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (o *countingOp) NotifyComplete(barrier.CheckpointID) error { return nil }
func (o *countingOp) Close() error                              { return nil }

// TestForwardEdgeOfUnequalParallelismRebalances: a p=1 source feeding a
// p=3 operator over a forward edge spreads its records over all three
// subtasks (the plan turns such an edge into a rebalance), instead of
// leaving two of them idle.
func TestForwardEdgeOfUnequalParallelismRebalances(t *testing.T) {
	const n = 30_000
	counts := make([]atomic.Int64, 3)
	j := runtime.NewJob(runtime.Options{Name: "unequal", DataDir: t.TempDir(), Parallelism: 3})
	src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: n}), runtime.WithParallelism(1))
	counted := runtime.Apply(src, "count", func() runtime.Operator[operators.Event, operators.Event] {
		return &countingOp{counts: counts}
	})
	var sunk atomic.Int64
	runtime.SinkTo(counted, "discard", operators.NewDiscard[operators.Event](&sunk))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := j.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if sunk.Load() != n {
		t.Fatalf("%d records reached the sink, want %d", sunk.Load(), n)
	}
	for i := range counts {
		if c := counts[i].Load(); c < n/6 {
			t.Errorf("subtask %d of 3 received %d of %d records, want about a third", i, c, n)
		}
	}
}
