package watermark

import (
	"math/rand"
	"slices"
	"testing"
	"time"
)

// TestSessionsAssign pins the gap: records less than Gap apart are one
// session, Gap apart two, and a record between two sessions merges them.
func TestSessionsAssign(t *testing.T) {
	s := Sessions{Gap: 10}
	open := []Session{{0, 10}, {18, 33}} // records at 0, and at 18 and 23
	for _, c := range []struct {
		t      int64
		merged Session
		lo, hi int
	}{
		{-10, Session{-10, 0}, 0, 0}, // Gap before the first record: a session of its own
		{-9, Session{-9, 10}, 0, 1},
		{5, Session{0, 15}, 0, 1},
		{8, Session{0, 18}, 0, 1},   // Gap before 18
		{9, Session{0, 33}, 0, 2},   // less than Gap from 0 and from 18: bridges both
		{10, Session{10, 33}, 1, 2}, // Gap after 0
		{20, Session{18, 33}, 1, 2}, // inside the second
		{32, Session{18, 42}, 1, 2},
		{33, Session{33, 43}, 2, 2}, // Gap after 23
	} {
		merged, lo, hi := s.Assign(open, c.t)
		if merged != c.merged || lo != c.lo || hi != c.hi {
			t.Errorf("Assign(%v, %d) = %v [%d, %d), want %v [%d, %d)", open, c.t, merged, lo, hi, c.merged, c.lo, c.hi)
		}
	}
}

// TestSessionsModel: times assigned one by one in a random order end in the
// sessions a plain model finds in the sorted times (a new session wherever
// two neighbours are Gap or more apart), whatever the order.
func TestSessionsModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for range 500 {
		s := Sessions{Gap: time.Duration(1 + rng.Intn(20))}
		times := make([]int64, 1+rng.Intn(40))
		for i := range times {
			times[i] = int64(rng.Intn(200)) - 100
		}
		var open []Session
		for _, at := range times {
			merged, lo, hi := s.Assign(open, at)
			open = slices.Replace(open, lo, hi, merged)
		}
		sorted := slices.Sorted(slices.Values(times))
		var want []Session
		for i, at := range sorted {
			if i == 0 || at-sorted[i-1] >= int64(s.Gap) {
				want = append(want, Session{Start: at})
			}
			want[len(want)-1].End = at + int64(s.Gap)
		}
		if !slices.Equal(open, want) {
			t.Fatalf("gap %d, times %v: sessions %v, want %v", s.Gap, times, open, want)
		}
	}
}
