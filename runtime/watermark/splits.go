package watermark

import (
	"fmt"
	"time"
)

// Split is the event-time tracker of one split (Kafka partition) of a source
// subtask. Observe is the per-record path: a compare and a store.
type Split struct {
	max    int64 // the largest event time seen; Min: none yet
	seen   bool  // a record arrived since the last Current
	active int64 // processing time (Unix ns) it was last seen active
	idle   bool
}

// Observe records a record of event time ts.
func (s *Split) Observe(ts int64) {
	if ts > s.max {
		s.max = ts
	}
	s.seen = true
}

// Resume counts the split as active from now (processing time): a source
// that paused it, fetching nothing, restarts its idle timeout when it
// fetches again, so that the pause does not make it idle.
func (s *Split) Resume(now time.Time) { s.active, s.idle = now.UnixNano(), false }

// Max returns the largest event time observed (or restored), Min if none:
// what a source saves per split in its checkpoint.
func (s *Split) Max() int64 { return s.max }

// Splits computes a source subtask's watermark from its splits with bounded
// out-of-orderness: a split's watermark is the largest event time it
// delivered minus the bound minus 1ns (records up to bound behind the
// largest are not late), and the subtask's is the minimum over the splits
// that are not idle. A split with no record for the idle timeout (processing
// time) is idle until its next record. A subtask with no split, or whose
// splits are all idle, is idle.
//
// Splits reads no clock: Current takes the time. Like Flink's periodic
// generators, idleness is decided at Current calls, so Observe stays cheap.
// It is not safe for concurrent use.
type Splits struct {
	bound, idleAfter int64
	all              []*Split
}

// NewSplits returns a tracker allowing records maxOutOfOrderness behind the
// largest event time seen, and declaring a split idle after idleTimeout
// without records (0: never).
func NewSplits(maxOutOfOrderness, idleTimeout time.Duration) *Splits {
	if maxOutOfOrderness < 0 || idleTimeout < 0 {
		panic(fmt.Sprintf("watermark: negative out-of-orderness %s or idle timeout %s", maxOutOfOrderness, idleTimeout))
	}
	return &Splits{bound: int64(maxOutOfOrderness), idleAfter: int64(idleTimeout)}
}

// Add starts tracking a split whose largest event time so far is restored
// (Min for a new split). now is the processing time: its idle timeout starts
// there.
func (ss *Splits) Add(restored int64, now time.Time) *Split {
	s := &Split{max: restored, active: now.UnixNano()}
	ss.all = append(ss.all, s)
	return s
}

// Remove stops tracking s (a partition revoked or read to its end).
func (ss *Splits) Remove(s *Split) {
	for i, o := range ss.all {
		if o == s {
			ss.all = append(ss.all[:i], ss.all[i+1:]...)
			return
		}
	}
}

// Len returns the number of splits tracked.
func (ss *Splits) Len() int { return len(ss.all) }

// Current returns the subtask's watermark at processing time now, and
// whether the subtask is idle. When it is idle, wm is the largest watermark
// of any split (a Valve flushes the same way when every input is idle).
func (ss *Splits) Current(now time.Time) (wm int64, idle bool) {
	t := now.UnixNano()
	low, top, active := Max, Min, false
	for _, s := range ss.all {
		if s.seen {
			s.seen, s.idle, s.active = false, false, t
		} else if ss.idleAfter > 0 && !s.idle && t-s.active >= ss.idleAfter {
			s.idle = true
		}
		w := ss.watermarkOf(s)
		top = max(top, w)
		if !s.idle {
			low, active = min(low, w), true
		}
	}
	if !active {
		return top, true
	}
	return low, false
}

// Of returns the watermark of split s and whether it was idle at the last
// Current: what a source that cuts its input on event-time boundaries
// decides from, per split.
func (ss *Splits) Of(s *Split) (wm int64, idle bool) { return ss.watermarkOf(s), s.idle }

func (ss *Splits) watermarkOf(s *Split) int64 {
	if s.max == Min {
		return Min
	}
	if s.max < Min+ss.bound+1 {
		return Min
	}
	return s.max - ss.bound - 1
}
