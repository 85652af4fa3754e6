package repartition

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Status is stage 1's state as the runner shows it (/readyz, the status
// API): the input partitions the group assigned to this instance, and the
// failure stage 1 is retrying, if any. Safe for concurrent use.
type Status struct {
	mu struct {
		sync.Mutex
		assigned map[string]map[int32]bool // topic → partitions
		err      error                     // the failure being retried; nil: none
		since    time.Time                 // of the first failure in a row
		retries  int                       // failed sessions in a row
		commits  int                       // transactions committed
	}
}

// NewStatus returns the status of a stage 1 that has not joined its group
// yet.
func NewStatus() *Status {
	s := &Status{}
	s.mu.assigned = map[string]map[int32]bool{}
	return s
}

// Assigned returns the input partitions assigned to this instance now,
// sorted.
func (s *Status) Assigned() map[string][]int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]int32, len(s.mu.assigned))
	for topic, ps := range s.mu.assigned {
		out[topic] = slices.Sorted(maps.Keys(ps))
	}
	return out
}

// Health reports whether stage 1 runs without a failure since its last
// commit, and otherwise which failure it is retrying, since when and how
// often it failed.
func (s *Status) Health() (ok bool, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.err == nil {
		return true, ""
	}
	return false, fmt.Sprintf("stage 1 failing since %s (%d sessions in a row), retrying: %v",
		s.mu.since.UTC().Format(time.RFC3339), s.mu.retries, s.mu.err)
}

func (s *Status) assign(m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range m {
		if s.mu.assigned[topic] == nil {
			s.mu.assigned[topic] = map[int32]bool{}
		}
		for _, p := range ps {
			s.mu.assigned[topic][p] = true
		}
	}
}

func (s *Status) revoke(m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range m {
		for _, p := range ps {
			delete(s.mu.assigned[topic], p)
		}
		if len(s.mu.assigned[topic]) == 0 {
			delete(s.mu.assigned, topic)
		}
	}
}

// left forgets the assignment: the session's client is closed.
func (s *Status) left() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.mu.assigned)
}

// failed records a failed session; it returns how many failed in a row.
func (s *Status) failed(err error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.err == nil {
		s.mu.since = time.Now()
	}
	s.mu.err = err
	s.mu.retries++
	return s.mu.retries
}

// committed records a committed transaction: stage 1 works again.
func (s *Status) committed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.err, s.mu.retries = nil, 0
	s.mu.commits++
}

// Committed reports whether stage 1 committed a transaction since it
// started: it reads and sends.
func (s *Status) Committed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.commits > 0
}
