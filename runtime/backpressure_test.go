package runtime_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
	"github.com/prometheus/client_golang/prometheus"
)

// slowSink takes a millisecond for every batch it writes.
type slowSink struct{}

func (slowSink) Open(*runtime.Context) error { return nil }
func (slowSink) Write([]operators.Event) error {
	time.Sleep(time.Millisecond)
	return nil
}
func (slowSink) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (slowSink) NotifyComplete(barrier.CheckpointID) error { return nil }
func (slowSink) Close() error                              { return nil }

// taskOf returns the status of the task whose chain is named chain.
func taskOf(t *testing.T, st runtime.JobStatus, chain string) runtime.TaskStatus {
	t.Helper()
	for _, ts := range st.Tasks {
		if ts.Chain == chain {
			return ts
		}
	}
	t.Fatalf("no task of chain %q in %+v", chain, st.Tasks)
	return runtime.TaskStatus{}
}

// share returns part's share of the task's running time.
func share(ts runtime.TaskStatus, part time.Duration) float64 {
	total := ts.BusyTime + ts.BackpressuredTime + ts.IdleTime
	if total == 0 {
		return 0
	}
	return float64(part) / float64(total)
}

// TestBackpressureOfASlowSink: a sink that takes a millisecond per batch
// keeps its queue full, so the source upstream spends nearly all its time
// waiting for room (backpressured) and the sink nearly all its time busy.
// The job runs in a synctest bubble: the clock moves only while every
// goroutine waits, here only while the sink sleeps, so the shares are set
// by what each task waits for, not by the machine's speed.
func TestBackpressureOfASlowSink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		j := runtime.NewJob(runtime.Options{Name: "slow-sink", DataDir: t.TempDir(), BatchSize: 64, Registerer: reg})
		src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: 64 * 500}))
		runtime.SinkTo(runtime.Rebalance(src, "spread"), "slow", func() runtime.Sink[operators.Event] { return slowSink{} })
		if err := j.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		st := j.Status()
		source, sink := taskOf(t, st, "seq"), taskOf(t, st, "spread -> slow")
		t.Logf("source: busy %s, backpressured %s, idle %s", source.BusyTime, source.BackpressuredTime, source.IdleTime)
		t.Logf("sink: busy %s, backpressured %s, idle %s", sink.BusyTime, sink.BackpressuredTime, sink.IdleTime)
		if s := share(source, source.BackpressuredTime); s < 0.8 {
			t.Errorf("source backpressured %.0f%% of its time, want most of it", 100*s)
		}
		if s := share(sink, sink.BusyTime); s < 0.8 {
			t.Errorf("sink busy %.0f%% of its time, want most of it", 100*s)
		}
		if sink.BackpressuredTime != 0 {
			t.Errorf("sink backpressured for %s: it sends nothing", sink.BackpressuredTime)
		}
		// The metrics say the same, in seconds.
		for _, c := range []struct {
			name, op string
			want     time.Duration
		}{
			{"ebbflow_task_backpressured_seconds_total", "seq", source.BackpressuredTime},
			{"ebbflow_task_busy_seconds_total", "spread", sink.BusyTime},
			{"ebbflow_task_idle_seconds_total", "seq", source.IdleTime},
		} {
			if got := labeled(t, reg, c.name, "operator", c.op); got != c.want.Seconds() {
				t.Errorf("%s{operator=%q} = %v, want %v as in the status", c.name, c.op, got, c.want.Seconds())
			}
		}
	})
}

// TestIdleOfAStarvedOperator: a source paced to a trickle (its reads mostly
// return nothing) leaves itself and the operator it feeds idle nearly all
// the time, busy and backpressured hardly at all.
func TestIdleOfAStarvedOperator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := runtime.NewJob(runtime.Options{Name: "starved", DataDir: t.TempDir()})
		src := runtime.FromSource(j, "trickle", operators.NewSequence(operators.SequenceConfig{Count: 200, Rate: 1000}))
		starved := runtime.Map(runtime.Rebalance(src, "spread"), "starved", func(e operators.Event) operators.Event { return e })
		runtime.SinkTo(starved, "discard", operators.NewDiscard[operators.Event](nil))
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		if err := j.Run(ctx); err != nil {
			t.Fatal(err)
		}
		st := j.Status()
		for _, chain := range []string{"trickle", "spread -> starved -> discard"} {
			ts := taskOf(t, st, chain)
			t.Logf("%s: busy %s, backpressured %s, idle %s", chain, ts.BusyTime, ts.BackpressuredTime, ts.IdleTime)
			if s := share(ts, ts.IdleTime); s < 0.8 {
				t.Errorf("%s idle %.0f%% of its time, want most of it", chain, 100*s)
			}
			if ts.IdleTime < 100*time.Millisecond {
				t.Errorf("%s idle for %s; 200 records at 1000/s take 200ms", chain, ts.IdleTime)
			}
		}
	})
}
