package runtime_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"
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
//
// tweak, if not nil, adjusts the job's options and the test job before the
// run, and gets the job to read its status after it.
func runChaos(t *testing.T, seed int64, par int, mode barrier.Mode, budget int, tweak func(*runtime.Options, *eotest.Config) func(*runtime.Job)) (*chaos.Faults, error) {
	const count, keys = 200_000, 500
	dir := t.TempDir()
	f := chaos.New(seed, budget)
	opts := runtime.Options{Name: "eo", DataDir: dir, BatchSize: 256,
		StateBackend: chaos.Backends(state.NewMemoryFactory(), f),
		Checkpoint:   runtime.CheckpointOptions{Interval: 5 * time.Millisecond, Mode: mode},
		Restart:      runtime.RestartOptions{MaxAttempts: 1000, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	cfg := eotest.Config{Count: count, Keys: keys, Parallelism: par, PerCheckpoint: 1500 / par,
		Wrap: func(s runtime.Stream[operators.Event]) runtime.Stream[operators.Event] {
			return chaos.Operator(s, "chaos", f)
		},
		WrapSink: func(s runtime.Sink[operators.Event]) runtime.Sink[operators.Event] { return chaos.Sink(s, f) },
	}
	var after func(*runtime.Job)
	if tweak != nil {
		after = tweak(&opts, &cfg)
	}
	j := runtime.NewJob(opts)
	out := filepath.Join(dir, "out")
	eotest.Build(j, cfg, out)
	if err := j.Run(t.Context()); err != nil {
		t.Fatalf("seed %d: run: %v", seed, err)
	}
	t.Logf("seed %d: %d faults injected: %v", seed, f.Total(), f.Schedule())
	if after != nil {
		after(j)
	}
	return f, eotest.Check(out, count, keys)
}

func TestExactlyOnceWithInjectedFaults(t *testing.T) {
	for _, par := range []int{1, 3} {
		t.Run(fmt.Sprintf("p=%d", par), func(t *testing.T) {
			s := seed(t)
			f, err := runChaos(t, s, par, barrier.ExactlyOnce, 3, nil)
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
		f, err := runChaos(t, s+i, 3, barrier.AtLeastOnce, 5, nil)
		if err != nil {
			t.Logf("seed %d: detected as expected after %d faults: %.300s", s+i, f.Total(), err)
			return
		}
	}
	t.Fatalf("seeds %d..%d: at-least-once runs with faults were never caught by the oracle", s, s+4)
}

// TestExactlyOnceWithAStalledInput: one source subtask, chosen by the seed,
// stalls after a seeded number of records, sending neither records nor
// barriers. The operator downstream blocks its other inputs at each barrier
// and, after the alignment timeout, aborts the checkpoint naming the
// stalled subtask; the job goes on through its seeded faults and restarts.
// At the first such abort the stalled subtask crashes: the job restarts from
// its last completed checkpoint, and the stall comes back in the new
// attempt. Once it has been named in enough aborts the stall ends, the
// checkpoints complete, the job finishes, and its committed output is
// exactly the answer.
func TestExactlyOnceWithAStalledInput(t *testing.T) {
	const par = 3
	s := seed(t)
	rng := rand.New(rand.NewSource(s))
	stall := chaos.NewStall(rng.Intn(par), 100+rng.Intn(500))
	w := &stallWatch{stall: stall, want: 3, crash: true, completed: make(chan struct{})}
	stalled := fmt.Sprintf("sequence (%d/%d)", stall.Subtask+1, par)
	var st runtime.JobStatus
	f, err := runChaos(t, s, par, barrier.ExactlyOnce, 3, func(o *runtime.Options, c *eotest.Config) func(*runtime.Job) {
		o.Checkpoint.AlignmentTimeout = 100 * time.Millisecond
		o.Checkpoint.Timeout = 5 * time.Second
		o.Listener = w.listen
		c.WrapSource = func(src func() runtime.Source[operators.Event]) func() runtime.Source[operators.Event] {
			return chaos.StallSource(src, stall)
		}
		return func(j *runtime.Job) { st = j.Status() }
	})
	if err != nil {
		t.Fatalf("seed %d: %v", s, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("seed %d: %s stalled after %d records; %d restarts, %d during the stall; aborts before the release: %v",
		s, stalled, stall.After, st.Restarts, w.restarts, w.beforeRelease)
	if w.restarts == 0 {
		t.Fatalf("seed %d: no restart during the stall", s)
	}
	if w.alignment < w.want {
		t.Fatalf("seed %d: %d alignment timeouts before the release, want %d; aborts: %v", s, w.alignment, w.want, w.beforeRelease)
	}
	for _, err := range w.beforeRelease {
		var ate *runtime.AlignmentTimeoutError
		if errors.As(err, &ate) && !slices.Contains(ate.Late, stalled) {
			t.Errorf("seed %d: %v does not name the stalled %s", s, err, stalled)
		}
	}
	select {
	case <-w.completed:
	default:
		t.Fatalf("seed %d: no checkpoint completed after the stall ended", s)
	}
	if f.Total() == 0 {
		t.Fatalf("seed %d: no fault injected", s)
	}
}
