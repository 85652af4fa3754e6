// Package chaos injects seeded faults into jobs for exactly-once tests: an
// operator that fails while processing or snapshotting, a sink wrapper that
// fails at the barrier and around commits, and a state backend whose
// persisting fails (which aborts the checkpoint, not the job).
//
// The schedule is reproducible: whether the n-th call of a site in a subtask
// fails is a pure function of (seed, site, subtask, n), whatever the order in
// which goroutines reach their sites, so a test's -seed flag replays the
// same faults at the same calls. Each site's calls are cut into windows of
// 1/odds calls, and exactly one call in each of a subtask's first budget
// windows fails, at an offset drawn from the hash of the seed, site, subtask
// and window. A run that makes c calls of a site in a subtask therefore
// meets min(budget, c/window) faults there: the number of faults is set by
// the work a test does, not by how fast the machine does it.
package chaos

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
)

// ErrInjected marks every injected fault.
var ErrInjected = errors.New("injected fault")

// Odds is the share of failing calls at each site: one call in every
// round(1/odds) fails. Operators are called per batch, far more often than
// the checkpoint hooks.
var Odds = map[string]float64{
	"operator": 0.002, "operator snapshot": 0.03, "sink snapshot": 0.03,
	"before commit": 0.03, "after commit": 0.03, "persist": 0.05,
}

// Faults decides, from a seed, where faults happen: at most budget times per
// site and subtask.
type Faults struct {
	seed   int64
	window map[string]uint64 // calls per fault at each site
	budget uint64

	mu    sync.Mutex
	calls map[point]uint64
	hits  []Hit
}

type point struct {
	site    string
	subtask int
}

// Hit is one injected fault: the Call-th call (from 0) of Site in Subtask.
// For the persist site the subtask is the first key group the state owns.
type Hit struct {
	Site    string
	Subtask int
	Call    uint64
}

func (h Hit) String() string { return fmt.Sprintf("%s[%d]#%d", h.Site, h.Subtask, h.Call) }

// New returns faults drawn from seed with the default Odds, at most budget
// of them per site and subtask.
func New(seed int64, budget int) *Faults { return NewWithOdds(seed, budget, 1) }

// NewWithOdds is New with every site's chance multiplied by scale (capped
// at 1): for short tests that must meet many faults.
func NewWithOdds(seed int64, budget int, scale float64) *Faults {
	window := make(map[string]uint64, len(Odds))
	for site, p := range Odds {
		if p *= scale; p > 0 {
			window[site] = uint64(max(1, math.Round(1/min(1, p))))
		}
	}
	return &Faults{seed: seed, window: window, budget: uint64(max(0, budget)), calls: map[point]uint64{}}
}

// Fails reports whether call n (from 0) of site in subtask fails: a pure
// function of the seed, site, subtask and n.
func (f *Faults) Fails(site string, subtask int, n uint64) bool {
	w := f.window[site]
	if w == 0 || n/w >= f.budget {
		return false
	}
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, 32+len(site)), uint64(f.seed))
	b = binary.LittleEndian.AppendUint64(b, uint64(subtask))
	b = binary.LittleEndian.AppendUint64(b, n/w)
	b = append(b, site...)
	return n%w == base.Hash64(b)%w
}

// Hit counts a call of site in subtask and returns an injected error if the
// schedule fails it, or nil.
func (f *Faults) Hit(site string, subtask int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := point{site, subtask}
	n := f.calls[p]
	f.calls[p] = n + 1
	if !f.Fails(site, subtask, n) {
		return nil
	}
	h := Hit{site, subtask, n}
	f.hits = append(f.hits, h)
	return fmt.Errorf("%w at %v", ErrInjected, h)
}

// Hits returns the faults injected so far, per site.
func (f *Faults) Hits() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]int{}
	for _, h := range f.hits {
		m[h.Site]++
	}
	return m
}

// Schedule returns the faults injected so far, ordered by site, subtask and
// call: the same list for the same seed and the same calls, whatever the
// interleaving.
func (f *Faults) Schedule() []Hit {
	f.mu.Lock()
	hits := slices.Clone(f.hits)
	f.mu.Unlock()
	slices.SortFunc(hits, compareHits)
	return hits
}

func compareHits(a, b Hit) int {
	return cmp.Or(strings.Compare(a.Site, b.Site), cmp.Compare(a.Subtask, b.Subtask), cmp.Compare(a.Call, b.Call))
}

// Total returns the number of faults injected.
func (f *Faults) Total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.hits)
}

// Operator passes records through s and fails by the schedule.
func Operator[T any](s runtime.Stream[T], name string, f *Faults) runtime.Stream[T] {
	return runtime.Apply(s, name, func() runtime.Operator[T, T] { return &op[T]{f: f} })
}

type op[T any] struct {
	f       *Faults
	subtask int
}

func (c *op[T]) Open(ctx *runtime.Context) error { c.subtask = ctx.Subtask; return nil }
func (c *op[T]) ProcessBatch(in []T, out *runtime.Collector[T]) error {
	if err := c.f.Hit("operator", c.subtask); err != nil {
		return err
	}
	for _, e := range in {
		out.Emit(e)
	}
	return nil
}
func (c *op[T]) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, c.f.Hit("operator snapshot", c.subtask)
}
func (c *op[T]) NotifyComplete(barrier.CheckpointID) error { return nil }
func (c *op[T]) Close() error                              { return nil }

// Sink wraps s so that it fails at the barrier and around commits.
func Sink[T any](s runtime.Sink[T], f *Faults) runtime.Sink[T] { return &sink[T]{Sink: s, f: f} }

type sink[T any] struct {
	runtime.Sink[T]
	f       *Faults
	subtask int
}

func (s *sink[T]) Open(ctx *runtime.Context) error {
	s.subtask = ctx.Subtask
	return s.Sink.Open(ctx)
}

func (s *sink[T]) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	if err := s.f.Hit("sink snapshot", s.subtask); err != nil {
		return state.OperatorState{}, err
	}
	return s.Sink.Snapshot(id)
}

func (s *sink[T]) NotifyComplete(id barrier.CheckpointID) error {
	if err := s.f.Hit("before commit", s.subtask); err != nil {
		return err
	}
	if err := s.Sink.NotifyComplete(id); err != nil {
		return err
	}
	return s.f.Hit("after commit", s.subtask)
}

// OnTimer keeps the wrapped sink's timers working.
func (s *sink[T]) OnTimer(now time.Time) error {
	if th, ok := s.Sink.(runtime.TimerHandler); ok {
		return th.OnTimer(now)
	}
	return nil
}

// Backends wraps a state backend factory so that persisting fails by the
// schedule; a backend's subtask is the first key group it owns.
func Backends(b state.BackendFactory, f *Faults) state.BackendFactory { return backends{b, f} }

type backends struct {
	state.BackendFactory
	f *Faults
}

func (c backends) OpenKeyed(spec state.KeyedSpec) (state.KeyedBackend, error) {
	b, err := c.BackendFactory.OpenKeyed(spec)
	return backend{b, c.f, spec.KeyGroups.Start}, err
}

type backend struct {
	state.KeyedBackend
	f       *Faults
	subtask int
}

func (c backend) Capture(id barrier.CheckpointID, dir string) (func() ([]state.File, error), error) {
	persist, err := c.KeyedBackend.Capture(id, dir)
	if err != nil {
		return nil, err
	}
	return func() ([]state.File, error) {
		if err := c.f.Hit("persist", c.subtask); err != nil {
			return nil, err
		}
		return persist()
	}, nil
}

// PerCheckpoint wraps a source factory so that each subtask reads at most n
// records between two of its barriers (and before its first): a bounded
// input then takes a number of checkpoints set by its size, so the faults
// at checkpoint sites are met as often on a slow machine as on a fast one.
// The job needs periodic checkpoints, or it stalls at the first n records.
func PerCheckpoint[T any](src func() runtime.Source[T], n int) func() runtime.Source[T] {
	return func() runtime.Source[T] { return &perCheckpoint[T]{Source: src(), n: n} }
}

type perCheckpoint[T any] struct {
	runtime.Source[T]
	n, read int
}

func (s *perCheckpoint[T]) Read(buf []T) ([]T, error) {
	room := s.n - s.read
	if room <= 0 {
		// Nothing to read until the next barrier: return promptly, as a
		// source without data must, without spinning on the task.
		time.Sleep(time.Millisecond)
		return buf, nil
	}
	before := len(buf)
	buf, err := s.Source.Read(buf[:before:min(cap(buf), before+room)])
	s.read += len(buf) - before
	return buf, err
}

// Watermark passes the source's watermark on, if it has event time.
func (s *perCheckpoint[T]) Watermark(now time.Time) (int64, bool) {
	if ws, ok := s.Source.(runtime.WatermarkSource); ok {
		return ws.Watermark(now)
	}
	return watermark.Min, false
}

func (s *perCheckpoint[T]) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	s.read = 0
	return s.Source.Snapshot(id)
}

// Stall stops one source subtask for a while: after reading After records
// (in each attempt, until released) its Read blocks until Release, or until
// its run ends. Meanwhile it emits no record and takes no checkpoint
// trigger, so no barrier comes from it: the stalled input of alignment
// timeout tests.
type Stall struct {
	Subtask, After int

	release     chan struct{}
	releaseOnce sync.Once
	stalled     chan struct{}
	stallOnce   sync.Once
	crash       chan struct{}
	crashOnce   sync.Once
	crashed     atomic.Bool
}

// NewStall returns a stall of subtask after it read after records.
func NewStall(subtask, after int) *Stall {
	return &Stall{Subtask: subtask, After: after, release: make(chan struct{}), stalled: make(chan struct{}),
		crash: make(chan struct{})}
}

// Release ends the stall, for good; it may be called more than once.
func (s *Stall) Release() { s.releaseOnce.Do(func() { close(s.release) }) }

// Crash makes the stalled Read fail once with an injected fault (the
// attempt restarts, and the subtask stalls again in the next one); it may
// be called more than once.
func (s *Stall) Crash() { s.crashOnce.Do(func() { close(s.crash) }) }

// Stalled is closed when the subtask first stalls.
func (s *Stall) Stalled() <-chan struct{} { return s.stalled }

// StallSource wraps a source factory with st.
func StallSource[T any](src func() runtime.Source[T], st *Stall) func() runtime.Source[T] {
	return func() runtime.Source[T] { return &stalling[T]{Source: src(), st: st} }
}

type stalling[T any] struct {
	runtime.Source[T]
	st   *Stall
	ctx  *runtime.Context
	read int
}

func (s *stalling[T]) Open(ctx *runtime.Context) error {
	s.ctx = ctx
	return s.Source.Open(ctx)
}

func (s *stalling[T]) Read(buf []T) ([]T, error) {
	if s.ctx.Subtask == s.st.Subtask && s.read >= s.st.After {
		if err := s.stall(); err != nil {
			return buf, err
		}
	}
	before := len(buf)
	buf, err := s.Source.Read(buf)
	s.read += len(buf) - before
	return buf, err
}

// stall waits for the release, the end of the run (nil both), or a crash.
func (s *stalling[T]) stall() error {
	select {
	case <-s.st.release:
		return nil
	default:
	}
	s.st.stallOnce.Do(func() { close(s.st.stalled) })
	crash := s.st.crash
	for {
		select {
		case <-s.st.release:
			return nil
		case <-crash:
			if s.st.crashed.CompareAndSwap(false, true) {
				return fmt.Errorf("%w: the stalled source subtask %d crashes", ErrInjected, s.st.Subtask)
			}
			crash = nil // crashed already: wait on
		case <-s.ctx.Context().Done():
			return nil
		}
	}
}

// The frame of an exactly-once oracle test under faults, shared by the
// operators' tests: a nil *Faults gives the same job without faults.

// JobOptions are the options of such a test's job: batches of 256,
// watermarks every millisecond, checkpoints every 5 ms, and restarts at
// once (up to 1000), with f's state backends over memory.
func JobOptions(name, dir string, f *Faults) runtime.Options {
	opts := runtime.Options{Name: name, DataDir: dir, BatchSize: 256, WatermarkInterval: time.Millisecond,
		Checkpoint: runtime.CheckpointOptions{Interval: 5 * time.Millisecond},
		Restart:    runtime.RestartOptions{MaxAttempts: 1000, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	if f != nil {
		opts.StateBackend = Backends(state.NewMemoryFactory(), f)
	}
	return opts
}

// Source adds src to j at parallelism par; with f, each subtask reads at
// most perCheckpoint records between barriers (PerCheckpoint) and an
// Operator after it fails by f's schedule.
func Source[T any](j *runtime.Job, name string, src func() runtime.Source[T], par, perCheckpoint int, f *Faults) runtime.Stream[T] {
	if f == nil {
		return runtime.FromSource(j, name, src, runtime.WithParallelism(par))
	}
	s := runtime.FromSource(j, name, PerCheckpoint(src, perCheckpoint), runtime.WithParallelism(par))
	return Operator(s, "chaos", f)
}

// Sinks wraps each sink the factory makes with Sink (f nil: the factory).
func Sinks[T any](sink func() runtime.Sink[T], f *Faults) func() runtime.Sink[T] {
	if f == nil {
		return sink
	}
	return func() runtime.Sink[T] { return Sink(sink(), f) }
}
