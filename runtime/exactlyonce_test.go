package runtime_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/eotest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

var seedFlag = flag.Int64("seed", 0, "seed of the randomized exactly-once tests (0: from the clock)")

// faults injects failures at random, from a seed, at most budget times.
type faults struct {
	mu     sync.Mutex
	rng    *rand.Rand
	budget int
	hits   map[string]int
}

// faultOdds is the chance of a fault per call at each site: operators are
// called per batch, far more often than the checkpoint hooks.
var faultOdds = map[string]float64{
	"operator": 0.002, "operator snapshot": 0.03, "sink snapshot": 0.03,
	"before commit": 0.03, "after commit": 0.03, "persist": 0.05,
}

var errInjected = errors.New("injected fault")

func (f *faults) hit(where string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.budget == 0 || f.rng.Float64() >= faultOdds[where] {
		return nil
	}
	f.budget--
	f.hits[where]++
	return fmt.Errorf("%w in %s", errInjected, where)
}

// chaosOp passes records through and fails at random.
type chaosOp struct{ f *faults }

func (c chaosOp) Open(*runtime.Context) error { return nil }
func (c chaosOp) ProcessBatch(in []operators.Event, out *runtime.Collector[operators.Event]) error {
	if err := c.f.hit("operator"); err != nil {
		return err
	}
	for _, e := range in {
		out.Emit(e)
	}
	return nil
}
func (c chaosOp) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, c.f.hit("operator snapshot")
}
func (c chaosOp) NotifyComplete(barrier.CheckpointID) error { return nil }
func (c chaosOp) Close() error                              { return nil }

// chaosSink fails at the barrier and around commits.
type chaosSink struct {
	runtime.Sink[operators.Event]
	f *faults
}

func (s chaosSink) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	if err := s.f.hit("sink snapshot"); err != nil {
		return state.OperatorState{}, err
	}
	return s.Sink.Snapshot(id)
}

func (s chaosSink) NotifyComplete(id barrier.CheckpointID) error {
	if err := s.f.hit("before commit"); err != nil {
		return err
	}
	if err := s.Sink.NotifyComplete(id); err != nil {
		return err
	}
	return s.f.hit("after commit")
}

// chaosBackends fails persisting keyed state at random (the checkpoint is
// aborted, the job goes on).
type chaosBackends struct {
	state.BackendFactory
	f *faults
}

func (c chaosBackends) OpenKeyed(spec state.KeyedSpec) (state.KeyedBackend, error) {
	b, err := c.BackendFactory.OpenKeyed(spec)
	return chaosBackend{b, c.f}, err
}

type chaosBackend struct {
	state.KeyedBackend
	f *faults
}

func (c chaosBackend) Capture(id barrier.CheckpointID, dir string) (func() ([]state.File, error), error) {
	persist, err := c.KeyedBackend.Capture(id, dir)
	if err != nil {
		return nil, err
	}
	return func() ([]state.File, error) {
		if err := c.f.hit("persist"); err != nil {
			return nil, err
		}
		return persist()
	}, nil
}

func seed(t *testing.T) int64 {
	s := *seedFlag
	if s == 0 {
		s = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun with -seed %d)", s, s)
	return s
}

// runChaos runs the exactly-once job with faults and returns the oracle's
// verdict.
func runChaos(t *testing.T, seed int64, par int, mode barrier.Mode, budget int) (error, map[string]int) {
	const count, keys = 200_000, 500
	dir := t.TempDir()
	f := &faults{rng: rand.New(rand.NewSource(seed)), budget: budget, hits: map[string]int{}}
	j := runtime.NewJob(runtime.Options{Name: "eo", DataDir: dir, BatchSize: 256,
		StateBackend: chaosBackends{state.NewMemoryFactory(), f},
		Checkpoint:   runtime.CheckpointOptions{Interval: 5 * time.Millisecond, Mode: mode},
		Restart:      runtime.RestartOptions{MaxAttempts: 1000, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	out := filepath.Join(dir, "out")
	// Paced to run about two seconds, so that many checkpoints meet faults.
	eotest.Build(j, eotest.Config{Count: count, Keys: keys, Parallelism: par, Rate: 100_000 / float64(par),
		Wrap: func(s runtime.Stream[operators.Event]) runtime.Stream[operators.Event] {
			return runtime.Apply(s, "chaos", func() runtime.Operator[operators.Event, operators.Event] { return chaosOp{f} })
		},
		WrapSink: func(s runtime.Sink[operators.Event]) runtime.Sink[operators.Event] { return chaosSink{s, f} },
	}, out)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := j.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return eotest.Check(out, count, keys), f.hits
}

func TestExactlyOnceWithInjectedFaults(t *testing.T) {
	for _, par := range []int{1, 3} {
		t.Run(fmt.Sprintf("p=%d", par), func(t *testing.T) {
			s := seed(t)
			err, hits := runChaos(t, s, par, barrier.ExactlyOnce, 20)
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
		err, hits := runChaos(t, s+i, 3, barrier.AtLeastOnce, 40)
		if err != nil {
			t.Logf("seed %d: detected as expected after faults %v: %.300s", s+i, hits, err)
			return
		}
	}
	t.Fatalf("seeds %d..%d: at-least-once runs with faults were never caught by the oracle", s, s+4)
}
