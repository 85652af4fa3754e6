package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/syncbuf"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/eotest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// restoredProbe records which checkpoint its subtask restored.
type restoredProbe struct {
	runtime.Sink[operators.Event]
	got *atomic.Int64 // checkpoint id + 1; 0: fresh
}

func (p restoredProbe) Open(ctx *runtime.Context) error {
	if ctx.RestoredOK {
		p.got.Store(int64(ctx.Restored) + 1)
	}
	return p.Sink.Open(ctx)
}

func completed(t *testing.T, dir string) []state.Checkpoint {
	t.Helper()
	s, err := state.OpenStorage(filepath.Join(dir, "jobs", "restore", "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	cps, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var done []state.Checkpoint
	for _, c := range cps {
		if c.Completed {
			done = append(done, c)
		}
	}
	return done
}

// TestCorruptCheckpointFallsBack corrupts the newest checkpoint: the next run
// names it in the log and restores the one before.
func TestCorruptCheckpointFallsBack(t *testing.T) {
	dir := t.TempDir()
	var restored atomic.Int64
	run := func(stopAfter time.Duration, logs *syncbuf.Buffer) error {
		opts := runtime.Options{Name: "restore", DataDir: dir,
			Checkpoint: runtime.CheckpointOptions{Interval: 10 * time.Millisecond, Retain: 3},
			Restart:    runtime.RestartOptions{MaxAttempts: -1}}
		if logs != nil {
			opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
		}
		j := runtime.NewJob(opts)
		eotest.Build(j, eotest.Config{Count: 1 << 40, Keys: 10, Parallelism: 2, Rate: 20_000,
			WrapSink: func(s runtime.Sink[operators.Event]) runtime.Sink[operators.Event] {
				return restoredProbe{s, &restored}
			}}, filepath.Join(dir, "out"))
		time.AfterFunc(stopAfter, j.Stop)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return j.Run(ctx)
	}
	if err := run(200*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	done := completed(t, dir)
	if len(done) < 2 {
		t.Fatalf("want at least 2 retained checkpoints, have %d", len(done))
	}
	newest, previous := done[len(done)-1], done[len(done)-2]
	md := filepath.Join(newest.Dir, state.MetadataFile)
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(md, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	if err := run(50*time.Millisecond, &logs); err != nil {
		t.Fatal(err)
	}
	if got := barrier.CheckpointID(restored.Load() - 1); restored.Load() == 0 || got != previous.ID {
		t.Fatalf("restored checkpoint %d, want %d (the one before the corrupt %d)", got, previous.ID, newest.ID)
	}
	if !strings.Contains(logs.String(), newest.Name) || !strings.Contains(logs.String(), "checkpoint skipped") {
		t.Fatalf("the log does not name the corrupt checkpoint %s:\n%s", newest.Name, logs.String())
	}
}

// TestOnlyCorruptCheckpointsRefuseFreshStart: a data directory whose
// completed checkpoints are all corrupt must not silently start over.
func TestOnlyCorruptCheckpointsRefuseFreshStart(t *testing.T) {
	dir := t.TempDir()
	j := runtime.NewJob(runtime.Options{Name: "restore", DataDir: dir, Checkpoint: runtime.CheckpointOptions{Retain: 1}})
	eotest.Build(j, eotest.Config{Count: 1000, Keys: 10, Parallelism: 1}, filepath.Join(dir, "out"))
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range completed(t, dir) {
		if err := os.WriteFile(filepath.Join(c.Dir, state.MetadataFile), []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	j = runtime.NewJob(runtime.Options{Name: "restore", DataDir: dir})
	eotest.Build(j, eotest.Config{Count: 1000, Keys: 10, Parallelism: 1}, filepath.Join(dir, "out"))
	err := j.Run(context.Background())
	if !errors.Is(err, runtime.ErrRestore) {
		t.Fatalf("run over corrupt checkpoints: %v, want ErrRestore", err)
	}
}

// slowSnapshot blocks a sink's snapshot longer than the checkpoint timeout
// once, so that checkpoint is aborted while the job goes on.
type slowSnapshot struct {
	runtime.Sink[operators.Event]
	once *sync.Once
}

func (s slowSnapshot) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	if id > 0 {
		s.once.Do(func() { time.Sleep(300 * time.Millisecond) })
	}
	return s.Sink.Snapshot(id)
}

func TestCheckpointTimeoutAbortsAndJobGoesOn(t *testing.T) {
	dir := t.TempDir()
	reg := newRegistry()
	j := runtime.NewJob(runtime.Options{Name: "timeout", DataDir: dir, Registerer: reg,
		Checkpoint: runtime.CheckpointOptions{Interval: 20 * time.Millisecond, Timeout: 100 * time.Millisecond}})
	var once sync.Once
	out := filepath.Join(dir, "out")
	eotest.Build(j, eotest.Config{Count: 40_000, Keys: 10, Parallelism: 1, Rate: 40_000,
		WrapSink: func(s runtime.Sink[operators.Event]) runtime.Sink[operators.Event] { return slowSnapshot{s, &once} },
	}, out)
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := eotest.Check(out, 40_000, 10); err != nil {
		t.Fatal(err)
	}
	if failed := counter(t, reg, "ebbflow_checkpoints_total", "failed"); failed < 1 {
		t.Fatalf("checkpoints failed = %v, want the timed-out one counted", failed)
	}
	if ok := counter(t, reg, "ebbflow_checkpoints_total", "completed"); ok < 3 {
		t.Fatalf("checkpoints completed = %v, want the job to go on checkpointing", ok)
	}
}

// firstCheckpointGuard fails if a record arrives before the initial
// checkpoint's metadata is on disk (the sink itself may hear of the
// completion a little later: what matters is that a crash now restores it).
type firstCheckpointGuard struct {
	runtime.Sink[operators.Event]
	metadata string
	snapped  bool
}

func (g *firstCheckpointGuard) Write(b []operators.Event) error {
	if _, err := os.Stat(g.metadata); err != nil {
		return fmt.Errorf("a record reached the sink before the initial checkpoint completed: %w", err)
	}
	return g.Sink.Write(b)
}

func (g *firstCheckpointGuard) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	if !g.snapped {
		g.snapped = true
		time.Sleep(20 * time.Millisecond) // a slow first snapshot widens the window
	}
	return g.Sink.Snapshot(id)
}

// TestNoRecordBeforeInitialCheckpoint: sinks see nothing before their
// baseline exists, or a crash then would leave writes nothing can undo.
func TestNoRecordBeforeInitialCheckpoint(t *testing.T) {
	for i := 0; i < 10; i++ {
		dir := t.TempDir()
		j := runtime.NewJob(runtime.Options{Name: "first", DataDir: dir, Parallelism: 2, Restart: runtime.RestartOptions{MaxAttempts: -1}})
		eotest.Build(j, eotest.Config{Count: 5000, Keys: 10, Parallelism: 2,
			WrapSink: func(s runtime.Sink[operators.Event]) runtime.Sink[operators.Event] {
				return &firstCheckpointGuard{Sink: s, metadata: filepath.Join(dir, "jobs", "first", "checkpoints", state.CheckpointName(0), state.MetadataFile)}
			},
		}, filepath.Join(dir, "out"))
		if err := j.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// failingOp fails every batch.
type failingOp struct{ err error }

func (f failingOp) Open(*runtime.Context) error { return nil }
func (f failingOp) ProcessBatch([]operators.Event, *runtime.Collector[operators.Event]) error {
	return f.err
}
func (f failingOp) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (f failingOp) NotifyComplete(barrier.CheckpointID) error { return nil }
func (f failingOp) Close() error                              { return nil }

// TestPermanentErrorEndsWithoutRestart: a Permanent error is not retried.
func TestPermanentErrorEndsWithoutRestart(t *testing.T) {
	reg := newRegistry()
	j := runtime.NewJob(runtime.Options{Name: "permanent", Registerer: reg,
		Restart: runtime.RestartOptions{MaxAttempts: 5, InitialBackoff: time.Millisecond}})
	src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: 100}))
	bad := runtime.Apply(src, "bad", func() runtime.Operator[operators.Event, operators.Event] {
		return failingOp{runtime.Permanent(errors.New("record 7 is undecodable"))}
	})
	runtime.SinkTo(bad, "discard", operators.NewDiscard[operators.Event](nil))
	err := j.Run(context.Background())
	if !errors.Is(err, runtime.ErrPermanent) || !strings.Contains(err.Error(), "record 7") {
		t.Fatalf("run: %v, want the permanent error", err)
	}
	if n := restarts(t, reg); n != 0 {
		t.Fatalf("%v restarts after a permanent error, want 0", n)
	}
}

// TestFailureWrappingCanceledFails: an operator error that wraps
// context.Canceled (a client closed under it, say) is a failure like any
// other: the job restarts and, once its restarts are used up, fails; it
// never ends as a success without its final checkpoint.
func TestFailureWrappingCanceledFails(t *testing.T) {
	reg := newRegistry()
	j := runtime.NewJob(runtime.Options{Name: "canceled", Registerer: reg,
		Restart: runtime.RestartOptions{MaxAttempts: 2, InitialBackoff: time.Millisecond}})
	src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: 100}))
	bad := runtime.Apply(src, "bad", func() runtime.Operator[operators.Event, operators.Event] {
		return failingOp{fmt.Errorf("fetch: %w", context.Canceled)}
	})
	runtime.SinkTo(bad, "discard", operators.NewDiscard[operators.Event](nil))
	err := j.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "failed after 2 restarts") {
		t.Fatalf("run: %v, want the failure after 2 restarts", err)
	}
	if n := restarts(t, reg); n != 2 {
		t.Fatalf("%v restarts, want 2", n)
	}
}
