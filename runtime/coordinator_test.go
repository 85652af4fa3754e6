package runtime

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebbflow/ebbflow/state"
)

// idleReader is a source that never yields a record.
type idleReader struct{}

func (idleReader) read() (int, error)                      { return 0, nil }
func (idleReader) watermarks(func() error) WatermarkSource { return nil }

// newTestAttempt returns an attempt of a job without operators, with real
// checkpoint storage in a temporary folder, for driving a coordinator by hand.
func newTestAttempt(t *testing.T, opts CheckpointOptions) *attempt {
	t.Helper()
	j := NewJob(Options{Name: "coord", Checkpoint: opts})
	j.metrics = newMetrics(nil, "coord", nil, nil)
	storage, err := state.OpenStorage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	return &attempt{job: j, storage: storage, log: slog.New(slog.DiscardHandler), ctx: ctx, cancel: cancel}
}

// newTestTask returns a task of one operator, a source if source is set; it
// is never run, the test reads its mailbox.
func newTestTask(att *attempt, uid string, source bool) *task {
	n := &node{uid: uid, parallelism: 1, source: source}
	t := &task{att: att, chain: &chain{name: uid, parallelism: 1, nodes: []*node{n}}, mailbox: newMailbox()}
	if source {
		t.src = idleReader{}
	}
	return t
}

// aborted reports whether t's mailbox holds the abort notice of id.
func aborted(tk *task, id uint64) bool {
	select {
	case <-tk.mailbox.signal:
		n := tk.mailbox.take()
		return n.hasAborted && uint64(n.aborted) == id
	default:
		return false
	}
}

// TestDeclineOnAFullChannelAbortsTheCheckpoint: a decline sent while the
// coordinator's channel is full (stale declines of earlier checkpoints queue
// there) still reaches the coordinator, which aborts the checkpoint at once
// instead of leaving it pending until its timeout. It runs in a synctest
// bubble: synctest.Wait returns once every goroutine is blocked (the
// decline parked on the full channel, or returned having dropped its
// message), and time only moves when the test sleeps.
func TestDeclineOnAFullChannelAbortsTheCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		att := newTestAttempt(t, CheckpointOptions{Timeout: time.Hour})
		c := newCoordinator(att, att.storage)
		src, sink := newTestTask(att, "src", true), newTestTask(att, "sink", false)
		c.setTasks([]*task{src, sink}, 1, true)
		c.start() // the initial checkpoint, 1, in flight
		ctx, cancel := context.WithCancel(context.Background())
		for range cap(c.acks) {
			c.decline(ctx, 0, causeDeclined, errors.New("stale decline of checkpoint 0"))
		}
		go c.decline(ctx, 1, causeDeclined, errors.New("sink declines checkpoint 1"))
		synctest.Wait()
		done := make(chan struct{})
		go func() { defer close(done); c.run(ctx) }()
		defer func() { cancel(); <-done }()
		synctest.Wait()
		if !aborted(sink, 1) {
			time.Sleep(time.Hour)
			synctest.Wait()
			t.Fatalf("checkpoint 1 not aborted by its decline; after its timeout (an hour later) aborted=%v", aborted(sink, 1))
		}
	})
}

// failingStore is checkpoint storage whose metadata writes fail.
type failingStore struct {
	checkpointStore
	err error
}

func (s failingStore) Complete(state.Metadata) (int64, error) { return 0, s.err }

// TestCoordinatorAbortsWhenTheMetadataCannotBeWritten: the driver performs
// the machine's persist through its storage and, the write failing, aborts
// the checkpoint: every task is told, and its folder is removed.
func TestCoordinatorAbortsWhenTheMetadataCannotBeWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		att := newTestAttempt(t, CheckpointOptions{Timeout: time.Hour})
		c := newCoordinator(att, failingStore{att.storage, errors.New("injected: disk full")})
		src := newTestTask(att, "src", true)
		c.setTasks([]*task{src}, 1, true)
		c.start()
		if _, err := os.Stat(att.storage.Path(1)); err != nil {
			t.Fatalf("checkpoint 1 triggered without its folder: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); c.run(ctx) }()
		defer func() { cancel(); <-done }()
		c.ack(ctx, src, 1, []state.SubtaskSnapshot{{}}, nil, 0)
		synctest.Wait()
		n := src.mailbox.take()
		if n.trigger == nil || n.trigger.ID != 1 || !n.hasAborted || n.aborted != 1 || n.hasDone {
			t.Fatalf("source's notices = %+v, want the trigger and the abort of checkpoint 1", n)
		}
		if _, err := os.Stat(att.storage.Path(1)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("folder of the aborted checkpoint: %v, want it removed", err)
		}
	})
}
