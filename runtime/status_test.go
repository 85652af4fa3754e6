package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/eotest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// eventLog is a Listener recording events as short strings, and checking
// that Status already reflects each event when the listener hears of it.
type eventLog struct {
	t   *testing.T
	job **runtime.Job
	mu  sync.Mutex
	got []string
}

func (l *eventLog) listen(ev runtime.Event) {
	st := (*l.job).Status()
	var s string
	switch ev.Kind {
	case runtime.EventState:
		s = fmt.Sprintf("a%d %s", ev.Attempt, ev.State)
		if st.State != ev.State {
			l.t.Errorf("event %s: status says %s", s, st.State)
		}
		if failing := ev.State == runtime.StateRestarting || ev.State == runtime.StateFailed; failing != (ev.Err != nil) {
			l.t.Errorf("event %s: err %v", s, ev.Err)
		}
	default:
		s = fmt.Sprintf("a%d %s %d", ev.Attempt, ev.Kind, ev.Checkpoint.ID)
		if ev.Checkpoint.Final {
			s += " final"
		}
		if ev.Kind == runtime.EventCheckpointCompleted && (st.LastCompleted == nil || st.LastCompleted.ID != ev.Checkpoint.ID) {
			l.t.Errorf("event %s: status's last completed is %+v", s, st.LastCompleted)
		}
		if ev.Kind == runtime.EventCheckpointTriggered && (st.InFlight == nil || st.InFlight.ID != ev.Checkpoint.ID) {
			l.t.Errorf("event %s: status's in flight is %+v", s, st.InFlight)
		}
		if ev.Kind == runtime.EventCheckpointAborted {
			if st.InFlight != nil {
				l.t.Errorf("event %s: status's in flight is %+v, want none", s, st.InFlight)
			}
			s += ": " + ev.Err.Error()
		}
	}
	l.mu.Lock()
	l.got = append(l.got, s)
	l.mu.Unlock()
}

func (l *eventLog) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func checkEvents(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestStatusBoundedJobFinishes: a bounded job ends finished with its final
// checkpoint as the last completed one, every subtask finished and the
// source's records counted; the listener hears the initial and the final
// checkpoint between the states.
func TestStatusBoundedJobFinishes(t *testing.T) {
	var j *runtime.Job
	l := &eventLog{t: t, job: &j}
	j = runtime.NewJob(runtime.Options{Name: "bounded", Parallelism: 2, Listener: l.listen})
	if st := j.Status(); st.State != runtime.StateCreated || len(st.Tasks) != 0 {
		t.Fatalf("before Run: %+v", st)
	}
	src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: 1000}))
	keyed := runtime.Rebalance(src, "spread")
	runtime.SinkTo(keyed, "discard", operators.NewDiscard[operators.Event](nil))
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := j.Status()
	if st.State != runtime.StateFinished || st.Attempt != 0 || st.Restarts != 0 || st.LastFailure != nil || st.Restored != nil {
		t.Fatalf("after Run: %+v", st)
	}
	if st.InFlight != nil || st.LastCompleted == nil || st.LastCompleted.ID != 1 || !st.LastCompleted.Final || st.Completed != 2 {
		t.Fatalf("checkpoints: in flight %+v, last %+v, completed %d; want final checkpoint 1, 2 completed", st.InFlight, st.LastCompleted, st.Completed)
	}
	if lc := st.LastCompleted; lc.Completed.Before(lc.Triggered) || lc.Duration != lc.Completed.Sub(lc.Triggered) {
		t.Fatalf("last completed times: %+v", lc)
	}
	if len(st.Tasks) != 4 {
		t.Fatalf("%d tasks, want 4: %+v", len(st.Tasks), st.Tasks)
	}
	var read, out, in int64
	for _, ts := range st.Tasks {
		if ts.State != runtime.TaskFinished || ts.Parallelism != 2 {
			t.Fatalf("task %+v, want finished of 2", ts)
		}
		if ts.Source {
			read += ts.RecordsIn
			out += ts.RecordsOut
		} else {
			in += ts.RecordsIn
		}
	}
	if read != 1000 || out != 1000 || in != 1000 {
		t.Fatalf("records: read %d, sent %d, received %d; want 1000 each", read, out, in)
	}
	checkEvents(t, l.events(), []string{
		"a0 initializing",
		"a0 running",
		"a0 triggered 0",
		"a0 completed 0",
		"a0 triggered 1 final",
		"a0 completed 1 final",
		"a0 finished",
	})
}

// TestStatusFailingJobRestarts: a job whose operator fails every batch
// restarts from its initial checkpoint until its restarts are used up, and
// ends failed with the error; the listener hears each attempt.
func TestStatusFailingJobRestarts(t *testing.T) {
	var j *runtime.Job
	l := &eventLog{t: t, job: &j}
	j = runtime.NewJob(runtime.Options{Name: "failing", Listener: l.listen,
		Restart: runtime.RestartOptions{MaxAttempts: 2, InitialBackoff: time.Millisecond}})
	src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{}))
	bad := runtime.Apply(src, "bad", func() runtime.Operator[operators.Event, operators.Event] {
		return failingOp{errors.New("boom")}
	})
	runtime.SinkTo(bad, "discard", operators.NewDiscard[operators.Event](nil))
	start := time.Now()
	err := j.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "failed after 2 restarts") {
		t.Fatalf("run: %v, want the failure after 2 restarts", err)
	}
	st := j.Status()
	if st.State != runtime.StateFailed || st.Attempt != 2 || st.Restarts != 2 {
		t.Fatalf("after Run: state %s attempt %d restarts %d, want failed 2 2", st.State, st.Attempt, st.Restarts)
	}
	if f := st.LastFailure; f == nil || f.Err.Error() != err.Error() || f.Time.Before(start) {
		t.Fatalf("last failure %+v, want %v", f, err)
	}
	if st.Restored == nil || st.Restored.ID != 0 || st.LastCompleted == nil || st.LastCompleted.ID != 0 || st.Completed != 1 {
		t.Fatalf("restored %+v, last completed %+v (%d), want checkpoint 0 both", st.Restored, st.LastCompleted, st.Completed)
	}
	var failed int
	for _, ts := range st.Tasks {
		if ts.State == runtime.TaskFailed {
			failed++
			if ts.Chain != "seq -> bad -> discard" || strings.Join(ts.Operators, ",") != "seq,bad,discard" || !ts.Source || ts.RecordsIn == 0 {
				t.Fatalf("failed task %+v, want the chain seq -> bad -> discard, which read records", ts)
			}
		}
	}
	if failed != 1 {
		t.Fatalf("%d failed tasks, want 1: %+v", failed, st.Tasks)
	}
	checkEvents(t, l.events(), []string{
		"a0 initializing",
		"a0 running",
		"a0 triggered 0",
		"a0 completed 0",
		"a0 restarting",
		"a1 initializing",
		"a1 running",
		"a1 restarting",
		"a2 initializing",
		"a2 running",
		"a2 failed",
	})
}

// TestStatusDuringRun reads Status of a running unbounded job from another
// goroutine: it is running and its source's records grow; Stop makes it
// stopping, then finished with a final checkpoint.
func TestStatusDuringRun(t *testing.T) {
	var j *runtime.Job
	l := &eventLog{t: t, job: &j}
	j = runtime.NewJob(runtime.Options{Name: "during", Listener: l.listen,
		Checkpoint: runtime.CheckpointOptions{Interval: time.Millisecond}})
	src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{}))
	runtime.SinkTo(src, "discard", operators.NewDiscard[operators.Event](nil))
	done := make(chan error, 1)
	go func() { done <- j.Run(context.Background()) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := j.Status()
		if st.State == runtime.StateRunning && st.Completed >= 2 && len(st.Tasks) == 1 && st.Tasks[0].RecordsIn > 0 {
			if st.Tasks[0].State != runtime.TaskRunning {
				t.Fatalf("task %+v, want running", st.Tasks[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not running with progress: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := j.Status()
	if st.State != runtime.StateFinished || st.LastCompleted == nil || !st.LastCompleted.Final {
		t.Fatalf("after Stop: %+v", st)
	}
	ev := l.events()
	var stopping bool
	for i, e := range ev {
		if e == "a0 stopping" {
			stopping = true
			if rest := ev[i+1:]; len(rest) < 1 || rest[len(rest)-1] != "a0 finished" {
				t.Fatalf("events after stopping: %v", rest)
			}
		}
	}
	if !stopping {
		t.Fatalf("no stopping event: %v", ev)
	}
}

// failPersistOnce is a state backend factory whose first persist of
// checkpoint id fails.
type failPersistOnce struct {
	state.BackendFactory
	id   barrier.CheckpointID
	done *atomic.Bool
}

func (f failPersistOnce) OpenKeyed(spec state.KeyedSpec) (state.KeyedBackend, error) {
	b, err := f.BackendFactory.OpenKeyed(spec)
	return failPersistBackend{b, f}, err
}

type failPersistBackend struct {
	state.KeyedBackend
	f failPersistOnce
}

func (b failPersistBackend) Capture(id barrier.CheckpointID, dir string) (func() ([]state.File, error), error) {
	persist, err := b.KeyedBackend.Capture(id, dir)
	if err != nil || id != b.f.id {
		return persist, err
	}
	return func() ([]state.File, error) {
		if b.f.done.CompareAndSwap(false, true) {
			return nil, errors.New("injected: disk full")
		}
		return persist()
	}, nil
}

// TestStatusCheckpointAborted: a bounded job whose keyed state cannot be
// persisted for its final checkpoint (once) hears that checkpoint
// triggered, then aborted with the persist failure as the cause, with
// nothing in flight in Status; the attempt waiting for it fails and the
// next one restores checkpoint 0 and finishes.
func TestStatusCheckpointAborted(t *testing.T) {
	var j *runtime.Job
	l := &eventLog{t: t, job: &j}
	j = runtime.NewJob(runtime.Options{Name: "aborted", Listener: l.listen,
		StateBackend: failPersistOnce{state.NewMemoryFactory(), 1, new(atomic.Bool)},
		Restart:      runtime.RestartOptions{MaxAttempts: 1, InitialBackoff: time.Millisecond}})
	src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: 100}))
	ks := runtime.KeyBy(src, func(e operators.Event) uint64 { return e.Key }, state.Uint64Codec{})
	p := runtime.Process(ks, "pass", func() runtime.KeyedProcessor[uint64, operators.Event, operators.Event] { return passKeyed{} })
	runtime.SinkTo(p, "discard", operators.NewDiscard[operators.Event](nil))
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := j.Status(); st.State != runtime.StateFinished || st.InFlight != nil || st.Restarts != 1 {
		t.Fatalf("after Run: %+v", st)
	}
	checkEvents(t, l.events(), []string{
		"a0 initializing",
		"a0 running",
		"a0 triggered 0",
		"a0 completed 0",
		"a0 triggered 1 final",
		`a0 aborted 1 final: persist state of "pass" subtask 0 for checkpoint 1: injected: disk full`,
		"a0 restarting",
		"a1 initializing",
		"a1 running",
		"a1 triggered 1 final",
		"a1 completed 1 final",
		"a1 finished",
	})
}

// TestStatusTriggerFailedIsAborted: a checkpoint whose folder cannot be
// created (a link into a file is in its place) is never triggered, and the listener
// hears it aborted with the cause (no triggered event before it): one that
// counts checkpoints sees every one. It is the final checkpoint, so the
// attempt fails; so does the next one, restoring checkpoint 0 (the link
// stays), and the job ends failed.
func TestStatusTriggerFailedIsAborted(t *testing.T) {
	dir := t.TempDir()
	storage, err := state.OpenStorage(filepath.Join(dir, "jobs", "untriggered", "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	var j *runtime.Job
	l := &eventLog{t: t, job: &j}
	listen := func(ev runtime.Event) {
		// On the coordinator goroutine, before it triggers the next one.
		if ev.Kind == runtime.EventCheckpointCompleted && ev.Checkpoint.ID == 0 && ev.Attempt == 0 {
			// A link into a file: stat says "not a directory".
			file := filepath.Join(dir, "file")
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(filepath.Join(file, "x"), storage.Path(1)); err != nil {
				t.Error(err)
			}
		}
		l.listen(ev)
	}
	j = runtime.NewJob(runtime.Options{Name: "untriggered", DataDir: dir, Listener: listen,
		Restart: runtime.RestartOptions{MaxAttempts: 1, InitialBackoff: time.Millisecond}})
	src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: 100}))
	runtime.SinkTo(src, "discard", operators.NewDiscard[operators.Event](nil))
	if err := j.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "trigger checkpoint 1") {
		t.Fatalf("run: %v, want the failed trigger of checkpoint 1", err)
	}
	ev := l.events()
	for i, e := range ev {
		for _, prefix := range []string{"a0 aborted 1 final", "a1 aborted 1 final"} {
			if cause, ok := strings.CutPrefix(e, prefix+": "); ok {
				if !strings.Contains(cause, "create checkpoint "+state.CheckpointName(1)) {
					t.Fatalf("aborted event's cause %q does not say the folder of checkpoint 1 could not be created", cause)
				}
				ev[i] = prefix
			}
		}
	}
	checkEvents(t, ev, []string{
		"a0 initializing",
		"a0 running",
		"a0 triggered 0",
		"a0 completed 0",
		"a0 aborted 1 final",
		"a0 restarting",
		"a1 initializing",
		"a1 running",
		"a1 aborted 1 final",
		"a1 failed",
	})
	if st := j.Status(); st.InFlight != nil || st.Completed != 1 || st.Restarts != 1 {
		t.Fatalf("after Run: in flight %+v, completed %d, restarts %d; want none in flight, 1 completed, 1 restart", st.InFlight, st.Completed, st.Restarts)
	}
}

// TestEdges: the job graph of a plan with a rebalance, a fan-in (a union,
// which chains with nothing) and a broadcast: the edges name the chains of
// the tasks and their partitioning; before Run there are none.
func TestEdges(t *testing.T) {
	j := runtime.NewJob(runtime.Options{Name: "edges", Parallelism: 2})
	a := runtime.FromSource(j, "a", operators.NewSequence(operators.SequenceConfig{Count: 10}))
	b := runtime.FromSource(j, "b", operators.NewSequence(operators.SequenceConfig{Count: 10}), runtime.WithParallelism(1))
	u := runtime.Union("u", runtime.Rebalance(a, "spread"), b)
	runtime.SinkTo(runtime.Broadcast(u, "all"), "discard", operators.NewDiscard[operators.Event](nil))
	if e := j.Edges(); len(e) != 0 {
		t.Fatalf("edges before Run: %+v", e)
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	chains := map[string]bool{}
	for _, ts := range j.Status().Tasks {
		chains[ts.Chain] = true
	}
	var got []string
	for _, e := range j.Edges() {
		if !chains[e.From] || !chains[e.To] {
			t.Errorf("edge %+v names a chain not among the tasks' %v", e, chains)
		}
		got = append(got, fmt.Sprintf("%s =%s=> %s", e.From, e.Partitioning, e.To))
	}
	checkEvents(t, got, []string{
		"a =rebalance=> spread",
		"spread =forward=> u",
		"b =rebalance=> u", // forward between parallelisms 1 and 2
		"u =broadcast=> all -> discard",
	})
}

// TestStatusCheckpointSize: a completed checkpoint's size is the bytes of
// every file in its folder, the metadata (which holds operator state such
// as a source's position inline) and the keyed state's files, for a job
// whose state is all inline and one with keyed state.
func TestStatusCheckpointSize(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			dir := t.TempDir()
			var sizes sync.Map // checkpoint id → size its completed event reported
			j := runtime.NewJob(runtime.Options{Name: "size", DataDir: dir, Parallelism: 2, Listener: func(ev runtime.Event) {
				if ev.Kind == runtime.EventCheckpointCompleted {
					sizes.Store(ev.Checkpoint.ID, ev.Checkpoint.Size)
				}
			}})
			if keyed {
				eotest.Build(j, eotest.Config{Count: 1000, Keys: 10, Parallelism: 2}, filepath.Join(dir, "out"))
			} else {
				src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: 1000}))
				runtime.SinkTo(src, "discard", operators.NewDiscard[operators.Event](nil))
			}
			if err := j.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			lc := j.Status().LastCompleted
			if lc == nil || !lc.Final {
				t.Fatalf("last completed checkpoint %+v, want the final one", lc)
			}
			storage, err := state.OpenStorage(filepath.Join(dir, "jobs", "size", "checkpoints"))
			if err != nil {
				t.Fatal(err)
			}
			var files int
			var want int64
			err = filepath.WalkDir(storage.Path(lc.ID), func(path string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return err
				}
				info, err := d.Info()
				files++
				want += info.Size()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if keyed && files < 2 {
				t.Fatalf("%d files in checkpoint %d, want the metadata and keyed state files", files, lc.ID)
			}
			if ev, _ := sizes.Load(lc.ID); lc.Size != want || ev != want {
				t.Fatalf("checkpoint %d: status size %d, event size %v; its %d files hold %d bytes", lc.ID, lc.Size, ev, files, want)
			}
		})
	}
}
