package build

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
)

// newUnboundedJob returns a runtime job reading an endless sequence, and a
// channel closed once it runs.
func newUnboundedJob() (*runtime.Job, <-chan struct{}) {
	running := make(chan struct{})
	var once sync.Once
	j := runtime.NewJob(runtime.Options{Name: "beside", Listener: func(ev runtime.Event) {
		if ev.Kind == runtime.EventState && ev.State == runtime.StateRunning {
			once.Do(func() { close(running) })
		}
	}})
	src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{}))
	runtime.SinkTo(src, "discard", operators.NewDiscard[operators.Event](nil))
	return j, running
}

// TestRunBesideKeepsAFailureWrappingCanceled: a producer whose run fails,
// while the job runs, with an error wrapping context.Canceled (a produce
// cut short by its client) ends the job with that failure; read through
// the context's cause it would pass for a plain cancellation and be lost.
func TestRunBesideKeepsAFailureWrappingCanceled(t *testing.T) {
	j, running := newUnboundedJob()
	produce := func(ctx context.Context) error {
		select {
		case <-running:
			return fmt.Errorf("datagen into topic %q: produce record 7: %w", "t", context.Canceled)
		case <-ctx.Done():
			return nil
		}
	}
	idle := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	failed, err := runBeside(context.Background(), j.Run, []func(context.Context) error{idle, produce})
	if failed == nil || !strings.Contains(failed.Error(), "produce record 7") {
		t.Fatalf("failed %v (job: %v), want the producer's failure", failed, err)
	}
	if st := j.Status().State; st != runtime.StateCanceled {
		t.Fatalf("job %s, want canceled by the producer's failure", st)
	}
}

// TestRunBesideParentCanceled: cancelling the parent context ends the job
// and its producers; what the producers return then is no failure.
func TestRunBesideParentCanceled(t *testing.T) {
	j, running := newUnboundedJob()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-running; cancel() }()
	stopped := func(ctx context.Context) error { <-ctx.Done(); return fmt.Errorf("produce: %w", ctx.Err()) }
	failed, err := runBeside(ctx, j.Run, []func(context.Context) error{stopped})
	if failed != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("failed %v, job %v; want no failure and the job cancelled", failed, err)
	}
}
