package chaos

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
)

var sites = []string{"operator", "operator snapshot", "sink snapshot", "before commit", "after commit", "persist"}

// drive makes calls calls of every site in each of subtasks subtasks, one
// goroutine per site and subtask, released in the given order; concurrent
// runs them all at once.
func drive(f *Faults, subtasks int, calls uint64, reverse, concurrent bool) {
	var order []point
	for _, s := range sites {
		for k := range subtasks {
			order = append(order, point{s, k})
		}
	}
	if reverse {
		slices.Reverse(order)
	}
	var wg sync.WaitGroup
	for _, p := range order {
		run := func() {
			for range calls {
				if err := f.Hit(p.site, p.subtask); err != nil && !errors.Is(err, ErrInjected) {
					panic(err)
				}
			}
		}
		if concurrent {
			wg.Go(run)
		} else {
			run()
		}
	}
	wg.Wait()
}

// TestSameSeedSameSchedule: the faults are a function of (seed, site,
// subtask, call), not of which goroutine reached the shared Faults first.
func TestSameSeedSameSchedule(t *testing.T) {
	const subtasks, calls, budget = 3, 5000, 4
	for _, seed := range []int64{1, 42, -7} {
		a, b := NewWithOdds(seed, budget, 2), NewWithOdds(seed, budget, 2)
		drive(a, subtasks, calls, false, true)
		drive(b, subtasks, calls, true, false)
		sa, sb := a.Schedule(), b.Schedule()
		if !slices.Equal(sa, sb) {
			t.Fatalf("seed %d: concurrent run injected %v, sequential reversed run %v", seed, sa, sb)
		}
		// The schedule is what Fails says, call by call.
		var want []Hit
		for _, s := range sites {
			for k := range subtasks {
				for n := range uint64(calls) {
					if a.Fails(s, k, n) {
						want = append(want, Hit{s, k, n})
					}
				}
			}
		}
		slices.SortFunc(want, compareHits)
		if !slices.Equal(sa, want) {
			t.Fatalf("seed %d: injected %v, Fails says %v", seed, sa, want)
		}
		t.Logf("seed %d: %v", seed, sa)
	}
	if a, b := New(1, 5), New(2, 5); func() bool {
		drive(a, 1, 2000, false, false)
		drive(b, 1, 2000, false, false)
		return slices.Equal(a.Schedule(), b.Schedule())
	}() {
		t.Fatalf("seeds 1 and 2 drew the same schedule %v", a.Schedule())
	}
}

// TestBudgetBoundsFaults: each site and subtask fails once per window of
// calls until its budget is spent, and never again; the total is bounded by
// budget × sites × subtasks, and reached when the calls cover the windows.
func TestBudgetBoundsFaults(t *testing.T) {
	const subtasks, budget = 3, 3
	f := New(9, budget)
	drive(f, subtasks, 10_000, false, true) // ≥ 3 windows of every site (operator: 500 calls)
	if got, want := f.Total(), budget*len(sites)*subtasks; got != want {
		t.Fatalf("%d faults, want the whole budget %d: %v", got, want, f.Schedule())
	}
	per := map[point][]uint64{}
	for _, h := range f.Schedule() {
		per[point{h.Site, h.Subtask}] = append(per[point{h.Site, h.Subtask}], h.Call)
	}
	for p, calls := range per {
		w := f.window[p.site]
		for i, n := range calls {
			if n/w != uint64(i) {
				t.Fatalf("%v: fault %d at call %d, outside window %d of %d calls", p, i, n, i, w)
			}
		}
	}
	// Fewer calls than the budget's windows: one fault per whole window.
	g := New(9, 100)
	drive(g, 1, 100, false, false)
	for _, s := range sites {
		want := 100 / g.window[s]
		if got := uint64(len(slices.DeleteFunc(g.Schedule(), func(h Hit) bool { return h.Site != s }))); got < want || got > want+1 {
			t.Fatalf("%s: %d faults in 100 calls of windows of %d, want %d (or one more in the partial window)", s, got, g.window[s], want)
		}
	}
	if n := New(9, 0); func() int { drive(n, subtasks, 1000, false, false); return n.Total() }() != 0 {
		t.Fatalf("budget 0 injected %v", n.Schedule())
	}
}

// TestPerCheckpoint: a wrapped source reads at most n records between two
// snapshots, and everything in the end.
func TestPerCheckpoint(t *testing.T) {
	const count, n = 1000, 70
	src := PerCheckpoint(operators.NewSequence(operators.SequenceConfig{Count: count}), n)()
	if err := src.Open(&runtime.Context{Parallelism: 1}); err != nil {
		t.Fatal(err)
	}
	total, snaps := 0, 0
	for {
		read := 0
		for range 5 { // a few reads: the quota, then nothing
			buf, err := src.Read(make([]operators.Event, 0, 64))
			read += len(buf)
			if err != nil {
				total += read
				if total != count {
					t.Fatalf("ended after %d records, want %d", total, count)
				}
				if want := (count + n - 1) / n; snaps+1 != want {
					t.Fatalf("%d records took %d checkpoint intervals, want %d", count, snaps+1, want)
				}
				return
			}
		}
		if read != n {
			t.Fatalf("read %d records between snapshots %d and %d, want %d", read, snaps, snaps+1, n)
		}
		total += read
		if _, err := src.Snapshot(0); err != nil {
			t.Fatal(err)
		}
		snaps++
	}
}
