package operators

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

func read(t *testing.T, dir string) []int64 {
	t.Helper()
	got, err := ReadCommitted[int64](dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestCollectSinkTwoPhase walks a sink through stage, commit, a crash after
// staging, and a restore that finishes the commit exactly once.
func TestCollectSinkTwoPhase(t *testing.T) {
	dir := t.TempDir()
	s := NewCollectSink[int64](dir, nil)()
	if err := s.Open(&runtime.Context{Subtask: 0, Parallelism: 1}); err != nil {
		t.Fatal(err)
	}
	must(t, s.Write([]int64{1, 2}))
	_, err := s.Snapshot(1)
	must(t, err)
	if got := read(t, dir); len(got) != 0 {
		t.Fatalf("committed before the checkpoint completed: %v", got)
	}
	must(t, s.NotifyComplete(1))
	must(t, s.NotifyComplete(1)) // repeated notices are harmless
	if got := read(t, dir); !reflect.DeepEqual(got, []int64{1, 2}) {
		t.Fatalf("after commit 1: %v", got)
	}
	must(t, s.Write([]int64{3}))
	st2, err := s.Snapshot(2)
	must(t, err)
	must(t, s.Write([]int64{4}))
	_, err = s.Snapshot(3) // staged, never completed: a leftover after the "crash"
	must(t, err)

	// Restore checkpoint 2 (it completed, but its notice was lost).
	r := NewCollectSink[int64](dir, nil)()
	ctx := &runtime.Context{Subtask: 0, Parallelism: 1, Restored: 2, RestoredOK: true,
		State: state.OperatorState{Lists: st2.Lists}}
	must(t, r.Open(ctx))
	if got := read(t, dir); !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Fatalf("after restore of 2: %v, want 1 2 3", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "staging")); len(ents) != 0 {
		t.Fatalf("leftover staging files not aborted: %v", ents)
	}
	// Restoring the same checkpoint again commits nothing twice.
	r2 := NewCollectSink[int64](dir, nil)()
	must(t, r2.Open(ctx))
	if got := read(t, dir); !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Fatalf("after a second restore: %v", got)
	}
}

// TestSequenceRescale restores the splits of two subtasks onto three and
// checks that together they continue each split exactly where it stopped.
func TestSequenceRescale(t *testing.T) {
	cfg := SequenceConfig{Count: 1000, Splits: 5, Keys: 7}
	var snaps []state.SubtaskSnapshot
	seen := map[uint64]int{}
	for i := 0; i < 2; i++ {
		s := NewSequence(cfg)()
		must(t, s.Open(&runtime.Context{Subtask: i, Parallelism: 2}))
		b, err := s.Read(make([]Event, 0, 100))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b {
			seen[e.Seq]++
		}
		st, err := s.Snapshot(1)
		must(t, err)
		snaps = append(snaps, state.SubtaskSnapshot{Subtask: i, Lists: st.Lists})
	}
	op := state.OperatorSnapshot{Parallelism: 2, Subtasks: snaps}
	for i := 0; i < 3; i++ {
		st, _ := state.Redistribute(op, 128, 3, i)
		s := NewSequence(cfg)()
		must(t, s.Open(&runtime.Context{Subtask: i, Parallelism: 3, RestoredOK: true, State: st}))
		for {
			b, err := s.Read(make([]Event, 0, 100))
			for _, e := range b {
				seen[e.Seq]++
				if e.Key != KeyOf(e.Seq, 7) || e.Value != ValueOf(e.Seq) {
					t.Fatalf("bad event %+v", e)
				}
			}
			if err == io.EOF {
				break
			}
			must(t, err)
		}
	}
	for seq := uint64(0); seq < cfg.Count; seq++ {
		if seen[seq] != 1 {
			t.Fatalf("seq %d read %d times", seq, seen[seq])
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSequenceTimeStep: with TimeStep each record's event time is Seq ×
// TimeStep, given by the same watermarks as with an EventTime function:
// each split's watermark is its largest event time less the bound (and
// 1 ns), the source's the least over its splits.
func TestSequenceTimeStep(t *testing.T) {
	const step, bound = time.Millisecond, 5 * time.Millisecond
	for _, cfg := range []SequenceConfig{
		{Count: 1000, Splits: 3, TimeStep: step, MaxOutOfOrderness: bound},
		{Count: 1000, Splits: 3, EventTime: func(seq uint64) int64 { return int64(seq) * int64(step) }, MaxOutOfOrderness: bound},
	} {
		src := NewSequence(cfg)()
		must(t, src.Open(&runtime.Context{Subtask: 0, Parallelism: 1}))
		wm, ok := src.(runtime.WatermarkSource)
		if !ok {
			t.Fatalf("a sequence with event time is not a runtime.WatermarkSource")
		}
		largest := make([]int64, cfg.Splits)
		for {
			b, err := src.Read(make([]Event, 0, 100))
			for _, e := range b {
				if e.Time != int64(e.Seq)*int64(step) {
					t.Fatalf("record %d at %d, want %d", e.Seq, e.Time, int64(e.Seq)*int64(step))
				}
				largest[e.Seq%uint64(cfg.Splits)] = e.Time
			}
			if w, _ := wm.Watermark(time.Now()); w != slices.Min(largest)-int64(bound)-1 && slices.Min(largest) > 0 {
				t.Fatalf("watermark %d, want %d", w, slices.Min(largest)-int64(bound)-1)
			}
			if err == io.EOF {
				break
			}
			must(t, err)
		}
	}
}
