package watermark

import (
	"testing"
	"time"
)

func TestSplitsBoundedOutOfOrderness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ss := NewSplits(5*time.Nanosecond, 0)
	if wm, idle := ss.Current(t0); !idle || wm != Min {
		t.Fatalf("no splits: %s idle=%v, want min idle", fmtW(wm), idle)
	}
	a, b := ss.Add(Min, t0), ss.Add(Min, t0)
	a.Observe(100)
	a.Observe(90) // out of order: the max stays
	if wm, idle := ss.Current(t0); idle || wm != Min {
		t.Fatalf("b has no record: %s idle=%v, want min (b holds it back)", fmtW(wm), idle)
	}
	b.Observe(50)
	if wm, _ := ss.Current(t0); wm != 44 {
		t.Fatalf("watermark %s, want 50-5-1 = 44", fmtW(wm))
	}
	b.Observe(200)
	if wm, _ := ss.Current(t0); wm != 94 {
		t.Fatalf("watermark %s, want min(100, 200)-5-1 = 94", fmtW(wm))
	}
	ss.Remove(a)
	if wm, _ := ss.Current(t0); wm != 194 || ss.Len() != 1 || a.Max() != 100 {
		t.Fatalf("after removing a: %s (%d splits), want 194 from b alone", fmtW(wm), ss.Len())
	}
}

func TestSplitsIdleness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ss := NewSplits(0, 10*time.Second)
	a, b := ss.Add(Min, t0), ss.Add(20, t0) // b restored at 20
	a.Observe(100)
	steps := []struct {
		at       time.Duration
		observeA int64 // 0: none
		observeB int64
		wm       int64
		idle     bool
	}{
		{at: 0, wm: 19},               // min(99, 19)
		{at: 5 * time.Second, wm: 19}, // b quiet for 5s: not yet idle
		{at: 9 * time.Second, observeA: 110, wm: 19},
		{at: 10 * time.Second, wm: 109},              // b idle after 10s without records: a alone
		{at: 18 * time.Second, wm: 109},              // a was seen at 9s: idle from 19s
		{at: 19 * time.Second, wm: 109, idle: true},  // both idle: the largest watermark
		{at: 21 * time.Second, observeB: 30, wm: 29}, // b active again, behind: the source's output must not go back (the runtime keeps it monotone)
		{at: 22 * time.Second, observeA: 120, wm: 29},
		{at: 31 * time.Second, wm: 119}, // b idle again
	}
	for i, s := range steps {
		if s.observeA != 0 {
			a.Observe(s.observeA)
		}
		if s.observeB != 0 {
			b.Observe(s.observeB)
		}
		wm, idle := ss.Current(t0.Add(s.at))
		if wm != s.wm || idle != s.idle {
			t.Fatalf("step %d at %s: watermark %s idle=%v, want %s idle=%v", i, s.at, fmtW(wm), idle, fmtW(s.wm), s.idle)
		}
	}
}

func TestTimeConversions(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 30, 0, 123, time.UTC)
	if got := ToTime(FromTime(now)); !got.Equal(now) {
		t.Fatalf("round trip %v, want %v", got, now)
	}
	if FromTime(time.Time{}) != Min || !ToTime(Min).IsZero() {
		t.Fatal("the zero time must be Min and back")
	}
	if FromTime(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)) != Max || FromTime(time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)) != Min+1 {
		t.Fatal("times outside int64 nanoseconds must clamp to Max and just above Min")
	}
	if FromTime(ToTime(Max)) != Max || !ToTime(Max).Equal(EndOfTime) {
		t.Fatal("Max must round-trip through EndOfTime")
	}
	if FromMillis(1500) != 1_500_000_000 || FromMillis(1<<62) != Max {
		t.Fatal("FromMillis")
	}
}

// TestSplitResume: a split paused by its source goes idle like any other
// (Of says so), and Resume restarts its idle timeout: it holds the
// watermark back again until the timeout passes without a record.
func TestSplitResume(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ss := NewSplits(0, 10*time.Second)
	a, b := ss.Add(Min, t0), ss.Add(Min, t0)
	a.Observe(100)
	b.Observe(300)
	ss.Current(t0)
	if wm, idle := ss.Current(t0.Add(11 * time.Second)); wm != 299 || !idle {
		t.Fatalf("both idle: %s idle=%v, want 299 idle", fmtW(wm), idle)
	}
	if wm, idle := ss.Of(a); wm != 99 || !idle {
		t.Fatalf("Of(a) = %s idle=%v, want 99 idle", fmtW(wm), idle)
	}
	a.Resume(t0.Add(12 * time.Second))
	for _, c := range []struct {
		at   time.Duration
		wm   int64
		idle bool
	}{{13 * time.Second, 99, false}, {22 * time.Second, 299, true}} {
		if wm, idle := ss.Current(t0.Add(c.at)); wm != c.wm || idle != c.idle {
			t.Fatalf("at %s: %s idle=%v, want %s idle=%v", c.at, fmtW(wm), idle, fmtW(c.wm), c.idle)
		}
	}
}
