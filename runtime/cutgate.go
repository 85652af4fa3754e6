package runtime

import (
	"errors"
	"sync"
	"sync/atomic"
)

// CutGate lets a source subtask decide where the job's checkpoints cut its
// input: a source that reads the versions of upstream tables holds every
// partition at a version boundary and opens its gate there, so that the
// barrier goes through exactly at the boundary (docs/CONSISTENCY.md).
//
// While a job has gates, every checkpoint but the initial one (periodic
// and final alike) is triggered only when every gate is open and, besides,
// when it is due. The coordinator closes every gate as it triggers, before
// any source sees the barrier; a gate cannot open again before its source
// took its Snapshot of that checkpoint (Open is ignored until then). So a
// source that opened its gate holds where it is until that Snapshot, and
// calls Open again (from Read) when it has reached its next cut. A job
// without gates checkpoints whenever a checkpoint is due.
type CutGate struct {
	set *cutGates
	i   int
}

// ErrNotSource is returned by Context.CutGate outside a source.
var ErrNotSource = errors.New("runtime: only a source subtask has a cut gate")

// CutGate registers a gate for this source subtask and returns it, closed
// (a second call returns the same gate). Call it in Open; the job's
// checkpoints wait for it from then on (for the attempt: a restarted job
// opens its sources again).
func (c *Context) CutGate() (*CutGate, error) {
	if c.cuts == nil {
		return nil, ErrNotSource
	}
	if c.gate == nil {
		c.gate = c.cuts.add()
	}
	return c.gate, nil
}

// Open tells that the subtask is at a point where a checkpoint may cut its
// input, and that it reads nothing further until its Snapshot of the next
// checkpoint. Opening an open gate does nothing, nor does opening a gate
// between the trigger of a checkpoint and the source's Snapshot of it.
func (g *CutGate) Open() { g.set.open(g.i) }

// Eager makes the job's checkpoints follow the cuts rather than the
// interval: once every gate is open, the checkpoint is triggered at once
// (CheckpointOptions.Interval does not apply; MinPause does), and the
// final checkpoint of a stop does not wait for the gates. A source whose
// gate is eager must be able to snapshot anywhere: a stop cuts its input
// between two of its cuts. Call it in Open, with CutGate.
func (g *CutGate) Eager() { g.set.eager.Store(true) }

// cutGates are the gates of an attempt's sources; the coordinator hears on
// ready when the last one opens.
type cutGates struct {
	ready chan struct{}
	eager atomic.Bool // a gate is eager (CutGate.Eager)
	mu    struct {
		sync.Mutex
		open  []bool
		nOpen int
		// barred: closed by a trigger whose barrier the gate's source has
		// not snapshotted yet.
		barred []bool
	}
}

func newCutGates() *cutGates { return &cutGates{ready: make(chan struct{}, 1)} }

func (s *cutGates) add() *CutGate {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.open = append(s.mu.open, false)
	s.mu.barred = append(s.mu.barred, false)
	return &CutGate{set: s, i: len(s.mu.open) - 1}
}

func (s *cutGates) open(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.open[i] || s.mu.barred[i] {
		return
	}
	s.mu.open[i] = true
	s.mu.nOpen++
	if s.mu.nOpen == len(s.mu.open) {
		signal(s.ready)
	}
}

// count returns how many gates there are and how many are open.
func (s *cutGates) count() (open, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.nOpen, len(s.mu.open)
}

// allOpen reports whether there are gates and all of them are open.
func (s *cutGates) allOpen() bool {
	open, total := s.count()
	return total > 0 && open == total
}

// closeAll closes every gate, each until its source snapshotted: a
// checkpoint is being triggered.
func (s *cutGates) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.mu.open)
	for i := range s.mu.barred {
		s.mu.barred[i] = true
	}
	s.mu.nOpen = 0
}

// snapshotted lets gate g open again: its source took its Snapshot of the
// checkpoint triggered last.
func (g *CutGate) snapshotted() {
	g.set.mu.Lock()
	defer g.set.mu.Unlock()
	g.set.mu.barred[g.i] = false
}
