package watermark

import (
	"fmt"
	"sort"
	"time"
)

// Sessions assigns the event times of one key to session windows: a record
// at t makes the window [t, t+Gap), and windows that overlap merge into one.
// So a session is a run of records each less than Gap after the one before
// (in event time, whatever their arrival order), from the first record's
// time to the last one's plus Gap; two records Gap or more apart with none
// between are in different sessions. A record that bridges two sessions
// merges them.
type Sessions struct{ Gap time.Duration }

// Session is one session window [Start, End), in ns since the epoch.
type Session struct{ Start, End int64 }

// Check reports a gap that is not positive.
func (s Sessions) Check() error {
	if s.Gap <= 0 {
		return fmt.Errorf("session gap %s is not positive", s.Gap)
	}
	return nil
}

// Assign returns what a record at t does to the open sessions of its key
// (disjoint, sorted by start, as Assign keeps them): it merges open[lo:hi],
// the sessions its window [t, t+Gap) overlaps, into merged, their union
// with that window. lo == hi: it overlaps none, and merged is its own
// window, to be inserted at lo. The caller replaces open[lo:hi] by merged.
// s must pass Check.
func (s Sessions) Assign(open []Session, t int64) (merged Session, lo, hi int) {
	merged = Session{Start: t, End: t + int64(s.Gap)}
	// The ends grow with the starts (the sessions are disjoint), so the
	// overlapped ones are a run: those ending after t and starting before
	// the record's window ends.
	lo = sort.Search(len(open), func(i int) bool { return open[i].End > t })
	hi = lo + sort.Search(len(open)-lo, func(i int) bool { return open[lo+i].Start >= merged.End })
	if lo < hi {
		merged.Start = min(merged.Start, open[lo].Start)
		merged.End = max(merged.End, open[hi-1].End)
	}
	return merged, lo, hi
}
