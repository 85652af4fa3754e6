package runtime_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebbflow/ebbflow/internal/chaos"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/prometheus/client_golang/prometheus"
)

// stallWatch is a Listener that releases a stall once it heard enough
// alignment-timeout aborts, and says when a checkpoint completed after the
// release. A checkpoint timeout releases it too: without alignment
// timeouts the stall would otherwise last for ever, and the test reports
// the missing aborts instead of hanging.
type stallWatch struct {
	stall         *chaos.Stall
	want          int  // alignment-timeout aborts before the release
	crash         bool // crash the stalled subtask at the first of them
	mu            sync.Mutex
	beforeRelease []error // every abort's error until the release, in order
	alignment     int     // alignment-timeout aborts among them
	restarts      int     // restarts during the stall
	released      bool
	completed     chan struct{} // closed at the first completion after the release
	closeOnce     sync.Once
}

func (w *stallWatch) listen(ev runtime.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch ev.Kind {
	case runtime.EventCheckpointAborted:
		if w.released {
			return
		}
		w.beforeRelease = append(w.beforeRelease, ev.Err)
		var ate *runtime.AlignmentTimeoutError
		if errors.As(ev.Err, &ate) {
			w.alignment++
			if w.crash {
				w.stall.Crash()
			}
		}
		if w.alignment >= w.want || strings.HasPrefix(ev.Err.Error(), "timed out after") {
			w.released = true
			w.stall.Release()
		}
	case runtime.EventState:
		if ev.State == runtime.StateRestarting && !w.released {
			w.restarts++
		}
	case runtime.EventCheckpointCompleted:
		if w.released {
			w.closeOnce.Do(func() { close(w.completed) })
		}
	}
}

// TestAlignmentTimeoutAbortsNamingTheSlowInput: one source subtask of two
// stops sending anything, barriers included; the sink downstream blocks the
// other input at each barrier and, after the alignment timeout, aborts the
// checkpoint with an error naming the stalled subtask and the time waited.
// The job goes on; once the stall ends the next checkpoint completes. In a
// synctest bubble the alignment timer and the coordinator's timers fire in
// fake time, so the run takes no wall-clock time and the waits are exact.
func TestAlignmentTimeoutAbortsNamingTheSlowInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const alignTimeout = 50 * time.Millisecond
		reg := prometheus.NewRegistry()
		w := &stallWatch{stall: chaos.NewStall(1, 100), want: 3, completed: make(chan struct{})}
		j := runtime.NewJob(runtime.Options{Name: "stalled", DataDir: t.TempDir(), Registerer: reg, Listener: w.listen,
			Checkpoint: runtime.CheckpointOptions{Interval: 10 * time.Millisecond, Timeout: time.Second, AlignmentTimeout: alignTimeout}})
		seq := chaos.StallSource(operators.NewSequence(operators.SequenceConfig{Rate: 10_000}), w.stall)
		src := runtime.FromSource(j, "seq", seq, runtime.WithParallelism(2))
		var sunk atomic.Int64
		runtime.SinkTo(runtime.Rebalance(src, "spread"), "sink", operators.NewDiscard[operators.Event](&sunk))
		done := make(chan error, 1)
		go func() { done <- j.Run(t.Context()) }()
		<-w.stall.Stalled()
		atStall := sunk.Load()
		<-w.completed
		j.Stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		w.mu.Lock()
		defer w.mu.Unlock()
		if w.alignment < w.want {
			t.Fatalf("aborts %v, want %d for the alignment timeout first", w.beforeRelease, w.want)
		}
		for _, err := range w.beforeRelease {
			var ate *runtime.AlignmentTimeoutError
			if !errors.As(err, &ate) {
				t.Fatalf("abort %v, want an alignment timeout", err)
			}
			if ate.Task != "spread -> sink (1/1)" || !slices.Equal(ate.Late, []string{"seq (2/2)"}) || ate.Waited != alignTimeout {
				t.Errorf("abort %+v: want task spread -> sink (1/1) late for seq (2/2) after %s", ate, alignTimeout)
			}
			want := fmt.Sprintf("task spread -> sink (1/1): checkpoint %d: alignment timed out after 50ms waiting for the barrier of seq (2/2)", ate.Checkpoint)
			if err.Error() != want {
				t.Errorf("abort error %q, want %q", err, want)
			}
		}
		// The fast input was read again after each abort: records flowed
		// while the other source stalled.
		if sunk.Load() <= atStall {
			t.Errorf("sink received %d records at the stall and %d at the end: the stall stopped the job", atStall, sunk.Load())
		}
		st := j.Status()
		if st.Aborted != len(w.beforeRelease) || st.LastAborted == nil || st.LastAborted.Err == nil ||
			!strings.Contains(st.LastAborted.Err.Error(), "seq (2/2)") || st.LastAborted.Aborted.Before(st.LastAborted.Triggered) {
			t.Errorf("status: %d aborted, last %+v; want %d, the last naming seq (2/2)", st.Aborted, st.LastAborted, len(w.beforeRelease))
		}
		if got := labeled(t, reg, "ebbflow_checkpoint_aborts_total", "reason", "alignment_timeout"); got != float64(w.alignment) {
			t.Errorf("ebbflow_checkpoint_aborts_total{reason=alignment_timeout} = %v, want %d", got, w.alignment)
		}
	})
}

// TestCheckpointTimeoutEndsAStuckAlignment: without an alignment timeout, a
// checkpoint that a stalled input holds up is aborted at its Timeout, and
// the coordinator's abort notice ends the alignment: the subtask reads its
// fast input again instead of waiting for a barrier that does not come,
// and records flow between the checkpoints while the stall lasts.
func TestCheckpointTimeoutEndsAStuckAlignment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stall := chaos.NewStall(1, 100)
		var sunk atomic.Int64
		var mu sync.Mutex
		var firstAbort int64 = -1
		listen := func(ev runtime.Event) {
			mu.Lock()
			defer mu.Unlock()
			if ev.Kind == runtime.EventCheckpointAborted && firstAbort < 0 {
				firstAbort = sunk.Load()
			}
		}
		j := runtime.NewJob(runtime.Options{Name: "stuck", DataDir: t.TempDir(), Listener: listen,
			Checkpoint: runtime.CheckpointOptions{Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond}})
		seq := chaos.StallSource(operators.NewSequence(operators.SequenceConfig{Rate: 10_000}), stall)
		src := runtime.FromSource(j, "seq", seq, runtime.WithParallelism(2))
		runtime.SinkTo(runtime.Rebalance(src, "spread"), "sink", operators.NewDiscard[operators.Event](&sunk))
		done := make(chan error, 1)
		go func() { done <- j.Run(t.Context()) }()
		<-stall.Stalled()
		time.Sleep(2 * time.Second)
		mu.Lock()
		atAbort := firstAbort
		mu.Unlock()
		after := sunk.Load()
		stall.Release()
		j.Stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		st := j.Status()
		t.Logf("sink: %d records at the first abort, %d 2s later; %d checkpoints aborted", atAbort, after, st.Aborted)
		if atAbort < 0 || st.Aborted < 5 {
			t.Fatalf("%d checkpoints aborted, want one every 200ms of the stall", st.Aborted)
		}
		if after-atAbort < 1000 {
			t.Fatalf("the sink received %d records in the 2s after the first abort, want the fast input read between checkpoints", after-atAbort)
		}
	})
}

// TestCheckpointAlignmentTime: a source subtask stalls for 300 ms while a
// checkpoint is in flight (no alignment timeout, a long checkpoint
// timeout), so the sink waits for its barrier that long; the checkpoint
// completes once the stall ends and reports, in its CheckpointInfo, the
// time its barriers took to align; while it is held, the status names the
// subtasks it waits for. In a synctest bubble the wait is exact.
func TestCheckpointAlignmentTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const stallFor = 300 * time.Millisecond
		stall := chaos.NewStall(1, 100)
		var mu sync.Mutex
		var longest time.Duration
		listen := func(ev runtime.Event) {
			if ev.Kind == runtime.EventCheckpointCompleted {
				mu.Lock()
				longest = max(longest, ev.Checkpoint.Alignment)
				mu.Unlock()
			}
		}
		j := runtime.NewJob(runtime.Options{Name: "aligned", DataDir: t.TempDir(), Registerer: prometheus.NewRegistry(), Listener: listen,
			Checkpoint: runtime.CheckpointOptions{Interval: 10 * time.Millisecond, Timeout: 10 * time.Second}})
		seq := chaos.StallSource(operators.NewSequence(operators.SequenceConfig{Rate: 10_000}), stall)
		src := runtime.FromSource(j, "seq", seq, runtime.WithParallelism(2))
		var sunk atomic.Int64
		runtime.SinkTo(runtime.Rebalance(src, "spread"), "sink", operators.NewDiscard[operators.Event](&sunk))
		done := make(chan error, 1)
		go func() { done <- j.Run(t.Context()) }()
		<-stall.Stalled()
		time.Sleep(stallFor)
		// The checkpoint in flight waits for the stalled source subtask
		// (it never took the trigger) and the sink (aligning), not for the
		// source that acknowledged.
		if in := j.Status().InFlight; in == nil || !slices.Equal(in.Waiting, []string{"seq (2/2)", "spread -> sink (1/1)"}) {
			t.Errorf("in flight during the stall: %+v, want it waiting for seq (2/2) and the sink", in)
		}
		stall.Release()
		time.Sleep(100 * time.Millisecond) // the held checkpoint completes, and later ones
		j.Stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		// The checkpoint in flight at the stall waited for it, less the
		// time between the stall and its trigger (at most an interval).
		if longest < stallFor-20*time.Millisecond || longest > stallFor+20*time.Millisecond {
			t.Fatalf("longest alignment of a completed checkpoint %s, want about %s (the stall)", longest, stallFor)
		}
	})
}
