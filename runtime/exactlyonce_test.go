package runtime_test

import (
	"context"
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

// runChaos runs the exactly-once job with faults and returns the oracle's
// verdict.
func runChaos(t *testing.T, seed int64, par int, mode barrier.Mode, budget int) (map[string]int, error) {
	const count, keys = 200_000, 500
	dir := t.TempDir()
	f := chaos.New(seed, budget)
	j := runtime.NewJob(runtime.Options{Name: "eo", DataDir: dir, BatchSize: 256,
		StateBackend: chaos.Backends(state.NewMemoryFactory(), f),
		Checkpoint:   runtime.CheckpointOptions{Interval: 5 * time.Millisecond, Mode: mode},
		Restart:      runtime.RestartOptions{MaxAttempts: 1000, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	out := filepath.Join(dir, "out")
	// Paced to run about two seconds, so that many checkpoints meet faults.
	eotest.Build(j, eotest.Config{Count: count, Keys: keys, Parallelism: par, Rate: 100_000 / float64(par),
		Wrap: func(s runtime.Stream[operators.Event]) runtime.Stream[operators.Event] {
			return chaos.Operator(s, "chaos", f)
		},
		WrapSink: func(s runtime.Sink[operators.Event]) runtime.Sink[operators.Event] { return chaos.Sink(s, f) },
	}, out)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := j.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	return f.Hits(), eotest.Check(out, count, keys)
}

func TestExactlyOnceWithInjectedFaults(t *testing.T) {
	for _, par := range []int{1, 3} {
		t.Run(fmt.Sprintf("p=%d", par), func(t *testing.T) {
			s := seed(t)
			hits, err := runChaos(t, s, par, barrier.ExactlyOnce, 20)
			t.Logf("faults injected: %v", hits)
			if err != nil {
				t.Fatalf("seed %d: %v", s, err)
			}
			total := 0
			for _, n := range hits {
				total += n
			}
			if total < 5 {
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
		hits, err := runChaos(t, s+i, 3, barrier.AtLeastOnce, 40)
		if err != nil {
			t.Logf("seed %d: detected as expected after faults %v: %.300s", s+i, hits, err)
			return
		}
	}
	t.Fatalf("seeds %d..%d: at-least-once runs with faults were never caught by the oracle", s, s+4)
}
