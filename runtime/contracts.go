package runtime

import (
	"context"
	"log/slog"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
	"github.com/prometheus/client_golang/prometheus"
)

// Context is what an operator, source or sink subtask gets when it opens.
type Context struct {
	Job            string
	Operator       string // the operator's uid, unique in the job
	Subtask        int
	Parallelism    int
	MaxParallelism int
	// Attempt counts in-process restarts of the job (0 on the first run).
	Attempt int
	// RetainedCheckpoints is the number of completed checkpoints the job
	// keeps: any of them may be restored, so a sink keeps what it needs to
	// undo back to the oldest.
	RetainedCheckpoints int
	// Restored is the checkpoint this attempt restored from, if RestoredOK.
	Restored   barrier.CheckpointID
	RestoredOK bool
	// State is the operator state handed to this subtask on restore (empty
	// on a fresh start): its share of every list, and every union whole.
	State state.OperatorState
	// Dir is a folder private to this operator subtask under the job's data
	// directory, kept across restarts.
	Dir string
	// Logger carries job, operator and subtask attributes.
	Logger *slog.Logger
	// Registerer registers the operator's own metrics (never nil).
	Registerer prometheus.Registerer

	timers *timerSet
	link   int
	cuts   *cutGates // a source's: the attempt's cut gates
	gate   *CutGate  // a source's, once it asked for it
	ctx    context.Context
	wm     int64 // the operator's watermark (see Watermark)
	events any   // *EventTimers[K] a keyed processor made in Open, or *operatorTimers
}

// Context returns a context cancelled when this run of the job ends (stop,
// failure, or Run's context): for bounding blocking work in Open.
func (c *Context) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// SetTimer asks for one OnTimer call (see TimerHandler) at or after t, on the
// task goroutine. A later call replaces an earlier request.
func (c *Context) SetTimer(t time.Time) { c.timers.set(c.link, t) }

// TimerHandler is implemented by operators and sinks that use SetTimer.
type TimerHandler interface {
	OnTimer(now time.Time) error
}

// Source produces records. One instance runs per source subtask, on its task
// goroutine; no method is called concurrently with another.
type Source[T any] interface {
	// Open prepares the subtask; ctx.State holds restored positions.
	Open(ctx *Context) error
	// Read appends the next records to buf (at most cap(buf)-len(buf)) and
	// returns it. With no data it must return promptly (within tens of
	// milliseconds) with nothing appended, so that checkpoints are not
	// delayed. io.EOF ends a bounded source.
	Read(buf []T) ([]T, error)
	// Snapshot returns the positions just after the last record Read
	// returned: the barrier of checkpoint id sits exactly there.
	Snapshot(id barrier.CheckpointID) (state.OperatorState, error)
	// NotifyComplete tells that checkpoint id completed (e.g. to commit
	// offsets for monitoring). It may be skipped for a checkpoint when a
	// later one completes first, and it is not called after a crash.
	NotifyComplete(id barrier.CheckpointID) error
	Close() error
}

// Sink consumes records; the two checkpoint hooks are what an exactly-once
// sink needs.
type Sink[T any] interface {
	Open(ctx *Context) error
	// Write consumes a batch; the sink must not keep batch after returning.
	Write(batch []T) error
	// Snapshot is called at the barrier of checkpoint id, after every record
	// before it was written: flush and make those writes durable (or stage
	// them), and return the state to save.
	Snapshot(id barrier.CheckpointID) (state.OperatorState, error)
	// NotifyComplete tells that checkpoint id completed: publish or commit
	// what was staged up to id. It must be idempotent, and a sink must be
	// able to finish the commit from restored state after a crash.
	NotifyComplete(id barrier.CheckpointID) error
	Close() error
}

// Operator transforms batches. Stateless operators can return empty state.
type Operator[In, Out any] interface {
	Open(ctx *Context) error
	// ProcessBatch handles in and emits results to out. It must not keep in.
	ProcessBatch(in []In, out *Collector[Out]) error
	Snapshot(id barrier.CheckpointID) (state.OperatorState, error)
	NotifyComplete(id barrier.CheckpointID) error
	Close() error
}

// KeyedProcessor handles the records of a keyed stream, one key at a time,
// with keyed state that is checkpointed and rescaled by key group.
type KeyedProcessor[K comparable, In, Out any] interface {
	// Open creates the processor's states on keyed (state.NewValue etc.).
	Open(ctx *Context, keyed *state.Keyed) error
	Process(key K, v In, out *Collector[Out]) error
	Close() error
}

// Collector receives an operator's output and pushes it downstream in
// batches, on the task goroutine.
type Collector[T any] struct {
	buf  []T
	next consumer[T]
	err  error
}

// Emit sends v downstream.
func (c *Collector[T]) Emit(v T) {
	c.buf = append(c.buf, v)
	if len(c.buf) == cap(c.buf) {
		c.flush()
	}
}

func (c *Collector[T]) flush() {
	if len(c.buf) == 0 {
		return
	}
	if c.err == nil {
		c.err = c.next.push(c.buf)
	}
	clear(c.buf)
	c.buf = c.buf[:0]
}

// done flushes what is left and returns the first downstream error.
func (c *Collector[T]) done() error {
	c.flush()
	err := c.err
	c.err = nil
	return err
}

// consumer is the typed input side of a chained operator or an exchange. It
// must not keep batch after push returns.
type consumer[T any] interface {
	push(batch []T) error
}
