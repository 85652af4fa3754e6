package runtime

import (
	"sync"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
)

// mailbox carries the coordinator's notices to a task without ever blocking
// the coordinator: a trigger slot (sources only), the newest completed
// checkpoint and the newest aborted one. Completion notices coalesce: a task
// told that N completed also knows every earlier one did.
type mailbox struct {
	signal chan struct{}
	mu     struct {
		sync.Mutex
		trigger    *barrier.Barrier
		completed  barrier.CheckpointID
		hasDone    bool
		aborted    barrier.CheckpointID
		hasAborted bool
	}
}

func newMailbox() *mailbox { return &mailbox{signal: make(chan struct{}, 1)} }

func (m *mailbox) postTrigger(b barrier.Barrier) {
	m.mu.Lock()
	m.mu.trigger = &b
	m.mu.Unlock()
	signal(m.signal)
}

func (m *mailbox) postComplete(id barrier.CheckpointID) {
	m.mu.Lock()
	if !m.mu.hasDone || id > m.mu.completed {
		m.mu.completed, m.mu.hasDone = id, true
	}
	m.mu.Unlock()
	signal(m.signal)
}

func (m *mailbox) postAbort(id barrier.CheckpointID) {
	m.mu.Lock()
	if !m.mu.hasAborted || id > m.mu.aborted {
		m.mu.aborted, m.mu.hasAborted = id, true
	}
	m.mu.Unlock()
	signal(m.signal)
}

// notices is what a task takes from its mailbox in one go.
type notices struct {
	trigger             *barrier.Barrier
	completed, aborted  barrier.CheckpointID
	hasDone, hasAborted bool
}

func (m *mailbox) take() notices {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := notices{trigger: m.mu.trigger, completed: m.mu.completed, hasDone: m.mu.hasDone,
		aborted: m.mu.aborted, hasAborted: m.mu.hasAborted}
	m.mu.trigger, m.mu.hasDone, m.mu.hasAborted = nil, false, false
	return n
}

// timerSet keeps the next timer each link of a task asked for.
type timerSet struct {
	at []time.Time // zero: none
}

func (s *timerSet) set(link int, t time.Time) { s.at[link] = t }

// next returns the earliest requested time.
func (s *timerSet) next() (time.Time, bool) {
	var best time.Time
	for _, t := range s.at {
		if !t.IsZero() && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	return best, !best.IsZero()
}
