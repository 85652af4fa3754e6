package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/eotest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// failOnceStopping fails the first snapshot taken once stopping is set:
// the final checkpoint of a Stop.
type failOnceStopping struct {
	runtime.Sink[operators.Event]
	stopping, failed *atomic.Bool
}

func (s failOnceStopping) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	if s.stopping.Load() && s.failed.CompareAndSwap(false, true) {
		return state.OperatorState{}, errors.New("injected: the final checkpoint fails")
	}
	return s.Sink.Snapshot(id)
}

// TestStopRetriesAFailedFinalCheckpoint: a failure during the final
// checkpoint of a Stop restarts the job from its latest checkpoint, which
// stops again with a final checkpoint: Run returns nil. Run to its end
// afterwards, the job's output is exact.
func TestStopRetriesAFailedFinalCheckpoint(t *testing.T) {
	const count, keys = 20_000, 10
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var stopping, failed atomic.Bool
	run := func(stopAfter time.Duration) error {
		j := runtime.NewJob(runtime.Options{Name: "stop", DataDir: dir,
			Checkpoint: runtime.CheckpointOptions{Interval: 20 * time.Millisecond},
			Restart:    runtime.RestartOptions{MaxAttempts: 3, InitialBackoff: time.Millisecond}})
		eotest.Build(j, eotest.Config{Count: count, Keys: keys, Parallelism: 2, Rate: 20_000,
			WrapSink: func(s runtime.Sink[operators.Event]) runtime.Sink[operators.Event] {
				return failOnceStopping{s, &stopping, &failed}
			}}, out)
		if stopAfter > 0 {
			time.AfterFunc(stopAfter, func() { stopping.Store(true); j.Stop() })
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return j.Run(ctx)
	}
	if err := run(150 * time.Millisecond); err != nil {
		t.Fatalf("stop with a failed final checkpoint: %v, want nil after a restart", err)
	}
	if !failed.Load() {
		t.Fatal("the final checkpoint's fault was never injected")
	}
	stopping.Store(false)
	if err := run(0); err != nil {
		t.Fatal(err)
	}
	if err := eotest.Check(out, count, keys); err != nil {
		t.Fatal(err)
	}
}
