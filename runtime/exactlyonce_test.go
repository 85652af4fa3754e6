package runtime_test

import (
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/chaos"
	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/internal/eotest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

var seedFlag = flag.Int64("seed", 0, "seed of the randomized exactly-once tests (0: from the clock)")

func seed(t *testing.T) int64 { return crashtest.Seed(t, *seedFlag) }

// runChaos runs the exactly-once job with faults, at most budget per site
// and subtask, and returns the faults injected and the oracle's verdict.
//
// The work, not the clock, sets how many faults a run meets: each source
// subtask reads at most 1500/par records between its barriers, so the
// 200,000 records (75,000 in the largest of 3 subtasks) take well over 100
// checkpoints on any machine, each calling every checkpoint site of every
// subtask; the schedule fails one call in every 20 (persist) to 33 calls of
// a site until the site's budget is spent.
func runChaos(t *testing.T, seed int64, par int, mode barrier.Mode, budget int) (*chaos.Faults, error) {
	const count, keys = 200_000, 500
	dir := t.TempDir()
	f := chaos.New(seed, budget)
	j := runtime.NewJob(runtime.Options{Name: "eo", DataDir: dir, BatchSize: 256,
		StateBackend: chaos.Backends(state.NewMemoryFactory(), f),
		Checkpoint:   runtime.CheckpointOptions{Interval: 5 * time.Millisecond, Mode: mode},
		Restart:      runtime.RestartOptions{MaxAttempts: 1000, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	out := filepath.Join(dir, "out")
	eotest.Build(j, eotest.Config{Count: count, Keys: keys, Parallelism: par, PerCheckpoint: 1500 / par,
		Wrap: func(s runtime.Stream[operators.Event]) runtime.Stream[operators.Event] {
			return chaos.Operator(s, "chaos", f)
		},
		WrapSink: func(s runtime.Sink[operators.Event]) runtime.Sink[operators.Event] { return chaos.Sink(s, f) },
	}, out)
	if err := j.Run(t.Context()); err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Logf("seed %d: %d faults injected: %v", seed, f.Total(), f.Schedule())
	return f, eotest.Check(out, count, keys)
}

func TestExactlyOnceWithInjectedFaults(t *testing.T) {
	for _, par := range []int{1, 3} {
		t.Run(fmt.Sprintf("p=%d", par), func(t *testing.T) {
			s := seed(t)
			f, err := runChaos(t, s, par, barrier.ExactlyOnce, 3)
			if err != nil {
				t.Fatalf("seed %d: %v", s, err)
			}
			// Even if every restart cost two checkpoints, the persist and
			// snapshot sites alone meet 3·par faults (runChaos): fewer
			// means the schedule is broken.
			if total := f.Total(); total < 3*par {
				t.Fatalf("seed %d: only %d faults injected; the test proves nothing", s, total)
			}
		})
	}
}

// TestAtLeastOnceIsDetected proves the oracle bites: without alignment,
// records after a barrier on a fast input enter the snapshot and are
// replayed after a restore, so some sum counts a record twice.
func TestAtLeastOnceIsDetected(t *testing.T) {
	s := seed(t)
	for i := int64(0); i < 5; i++ {
		f, err := runChaos(t, s+i, 3, barrier.AtLeastOnce, 5)
		if err != nil {
			t.Logf("seed %d: detected as expected after %d faults: %.300s", s+i, f.Total(), err)
			return
		}
	}
	t.Fatalf("seeds %d..%d: at-least-once runs with faults were never caught by the oracle", s, s+4)
}
