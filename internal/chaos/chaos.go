// Package chaos injects seeded faults into jobs for exactly-once tests: an
// operator that fails while processing or snapshotting, a sink wrapper that
// fails at the barrier and around commits, and a state backend whose
// persisting fails (which aborts the checkpoint, not the job).
package chaos

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"sync"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// ErrInjected marks every injected fault.
var ErrInjected = errors.New("injected fault")

// Odds is the chance of a fault per call at each site. Operators are called
// per batch, far more often than the checkpoint hooks.
var Odds = map[string]float64{
	"operator": 0.002, "operator snapshot": 0.03, "sink snapshot": 0.03,
	"before commit": 0.03, "after commit": 0.03, "persist": 0.05,
}

// Faults decides, from a seed, where faults happen, at most Budget times.
type Faults struct {
	mu     sync.Mutex
	rng    *rand.Rand
	odds   map[string]float64
	budget int
	hits   map[string]int
}

// New returns faults drawn from seed with the default Odds, at most budget
// of them.
func New(seed int64, budget int) *Faults { return NewWithOdds(seed, budget, 1) }

// NewWithOdds is New with every site's chance multiplied by scale (capped
// at 1): for short tests that must meet many faults.
func NewWithOdds(seed int64, budget int, scale float64) *Faults {
	odds := make(map[string]float64, len(Odds))
	for site, p := range Odds {
		odds[site] = min(1, p*scale)
	}
	return &Faults{rng: rand.New(rand.NewSource(seed)), odds: odds, budget: budget, hits: map[string]int{}}
}

// Hit returns an injected error at site where, or nil.
func (f *Faults) Hit(where string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.budget == 0 || f.rng.Float64() >= f.odds[where] {
		return nil
	}
	f.budget--
	f.hits[where]++
	return fmt.Errorf("%w in %s", ErrInjected, where)
}

// Hits returns the faults injected so far, per site.
func (f *Faults) Hits() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.hits)
}

// Total returns the number of faults injected.
func (f *Faults) Total() int {
	n := 0
	for _, v := range f.Hits() {
		n += v
	}
	return n
}

// Operator passes records through s and fails at random.
func Operator[T any](s runtime.Stream[T], name string, f *Faults) runtime.Stream[T] {
	return runtime.Apply(s, name, func() runtime.Operator[T, T] { return op[T]{f} })
}

type op[T any] struct{ f *Faults }

func (c op[T]) Open(*runtime.Context) error { return nil }
func (c op[T]) ProcessBatch(in []T, out *runtime.Collector[T]) error {
	if err := c.f.Hit("operator"); err != nil {
		return err
	}
	for _, e := range in {
		out.Emit(e)
	}
	return nil
}
func (c op[T]) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, c.f.Hit("operator snapshot")
}
func (c op[T]) NotifyComplete(barrier.CheckpointID) error { return nil }
func (c op[T]) Close() error                              { return nil }

// Sink wraps s so that it fails at the barrier and around commits.
func Sink[T any](s runtime.Sink[T], f *Faults) runtime.Sink[T] { return sink[T]{s, f} }

type sink[T any] struct {
	runtime.Sink[T]
	f *Faults
}

func (s sink[T]) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	if err := s.f.Hit("sink snapshot"); err != nil {
		return state.OperatorState{}, err
	}
	return s.Sink.Snapshot(id)
}

func (s sink[T]) NotifyComplete(id barrier.CheckpointID) error {
	if err := s.f.Hit("before commit"); err != nil {
		return err
	}
	if err := s.Sink.NotifyComplete(id); err != nil {
		return err
	}
	return s.f.Hit("after commit")
}

// OnTimer keeps the wrapped sink's timers working.
func (s sink[T]) OnTimer(now time.Time) error {
	if th, ok := s.Sink.(runtime.TimerHandler); ok {
		return th.OnTimer(now)
	}
	return nil
}

// Backends wraps a state backend factory so that persisting fails at random.
func Backends(b state.BackendFactory, f *Faults) state.BackendFactory { return backends{b, f} }

type backends struct {
	state.BackendFactory
	f *Faults
}

func (c backends) OpenKeyed(spec state.KeyedSpec) (state.KeyedBackend, error) {
	b, err := c.BackendFactory.OpenKeyed(spec)
	return backend{b, c.f}, err
}

type backend struct {
	state.KeyedBackend
	f *Faults
}

func (c backend) Capture(id barrier.CheckpointID, dir string) (func() ([]state.File, error), error) {
	persist, err := c.KeyedBackend.Capture(id, dir)
	if err != nil {
		return nil, err
	}
	return func() ([]state.File, error) {
		if err := c.f.Hit("persist"); err != nil {
			return nil, err
		}
		return persist()
	}, nil
}
