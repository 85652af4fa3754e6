package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
)

// reader is the data side of a source link.
type reader interface {
	read() (int, error)
	// watermarks sets what to call before a batch goes down the chain and
	// returns the source's WatermarkSource side, if it has one.
	watermarks(onData func() error) WatermarkSource
}

// task runs one subtask of a chain on one goroutine: it reads its source or
// its gate, pushes batches through the chained links, and performs the
// checkpoint actions.
type task struct {
	att     *attempt
	chain   *chain
	subtask int
	log     *slog.Logger
	links   []link
	ctxs    []*Context
	timers  *timerSet
	mailbox *mailbox
	outs    []exchange
	stat    *taskStat // progress for Job.Status

	// source chains
	src    reader
	wmSrc  WatermarkSource // nil: the source has no event time
	wmNext time.Time       // when to ask wmSrc next

	wm    wmState          // event time as the outputs know it
	valve *watermark.Valve // chains with inputs: combines their watermarks

	// chains with inputs
	gate    *gate
	aligner *barrier.Aligner
	input   any       // typed consumer of the head link
	alignAt time.Time // when the pending checkpoint's first barrier blocked an input (zero: none)

	waitComplete *barrier.CheckpointID // a source waits for this before reading on

	final    *barrier.CheckpointID // snapshotted the final checkpoint; end after its completion
	lastDone barrier.CheckpointID
	hasDone  bool
}

func (t *task) name() string {
	return fmt.Sprintf("%s (%d/%d)", t.chain.name, t.subtask+1, t.chain.parallelism)
}

// run is the task goroutine's body.
func (t *task) run(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("task %s panicked: %v", t.name(), r)
		}
	}()
	if err := t.announce(); err != nil {
		return err
	}
	if t.src != nil {
		return t.runSource(ctx)
	}
	return t.runInput(ctx)
}

func (t *task) runSource(ctx context.Context) error {
	finished := false
	batch := t.att.job.opts.BatchSize
	for {
		done, err := t.handleMailbox()
		if err != nil || done {
			return err
		}
		if err := t.fireTimers(); err != nil {
			return err
		}
		if finished || t.waitComplete != nil || t.final != nil {
			if err := t.wait(ctx, nil); err != nil {
				return err
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t.stat.time.enter(readingSource)
		n, err := t.src.read()
		read := t.stat.time.endRead(n > 0)
		if n > 0 {
			t.att.job.metrics.recordsIn(t.chain.nodes[0].uid, n)
			t.stat.in.Add(int64(n))
		}
		if errors.Is(err, io.EOF) {
			finished = true
			if err := t.endOfEventTime(); err != nil {
				return err
			}
			t.att.coord.sourceFinished(t)
			err = nil
		}
		if err != nil {
			return err
		}
		if err := t.pollSource(read); err != nil {
			return err
		}
		if n < batch {
			if err := t.flushOuts(); err != nil {
				return err
			}
		}
	}
}

func (t *task) runInput(ctx context.Context) error {
	for {
		done, err := t.handleMailbox()
		if err != nil || done {
			return err
		}
		if err := t.fireTimers(); err != nil {
			return err
		}
		if err := t.checkAlignmentTimeout(ctx); err != nil {
			return err
		}
		i, env, ok, pending := t.gate.poll()
		if !ok {
			if err := t.flushOuts(); err != nil {
				return err
			}
			if err := t.wait(ctx, t.gate.notEmpty); err != nil {
				return err
			}
			continue
		}
		switch env.kind {
		case evRecords:
			n, err := t.chain.nodes[0].deliver(t.input, env.records)
			t.att.job.metrics.recordsIn(t.chain.nodes[0].uid, n)
			t.stat.in.Add(int64(n))
			if err != nil {
				return err
			}
			if !pending {
				if err := t.flushOuts(); err != nil {
					return err
				}
			}
		case evBarrier:
			if err := t.perform(ctx, t.aligner.OnBarrier(i, env.barrier)); err != nil {
				return err
			}
		case evCancel:
			if err := t.perform(ctx, t.aligner.OnCancel(i, env.cancel)); err != nil {
				return err
			}
		case evWatermark:
			if err := t.onValve(t.valve.Watermark(i, env.wm)); err != nil {
				return err
			}
		case evIdle:
			if err := t.onValve(t.valve.Idle(i)); err != nil {
				return err
			}
		case evActive:
			if err := t.onValve(t.valve.Active(i)); err != nil {
				return err
			}
		case evEndOfInput:
			acts := t.aligner.OnEndOfInput(i)
			if err := t.perform(ctx, acts); err != nil {
				return err
			}
			if len(acts) > 0 && acts[len(acts)-1].Kind == barrier.EndOfInput {
				return t.finish(ctx)
			}
		}
	}
}

// perform carries out the aligner's actions.
func (t *task) perform(ctx context.Context, acts []barrier.Action) error {
	for _, a := range acts {
		switch a.Kind {
		case barrier.Block:
			if t.alignAt.IsZero() {
				t.alignAt = time.Now()
			}
			t.gate.setBlocked(a.Input, true)
		case barrier.Resume:
			t.gate.unblockAll()
		case barrier.Snapshot:
			var aligned time.Duration
			if !t.alignAt.IsZero() {
				aligned = time.Since(t.alignAt)
				t.att.job.metrics.alignment(aligned)
				t.alignAt = time.Time{}
			}
			if err := t.checkpoint(ctx, a.Barrier, aligned); err != nil {
				return err
			}
		case barrier.Abort:
			if a.Reason != barrier.CoordinatorAborted {
				cause, err := t.abortCause(a)
				t.att.coord.decline(ctx, a.ID, cause, err)
			}
			t.alignAt = time.Time{}
			if err := t.emit(envelope{kind: evCancel, cancel: a.ID}); err != nil {
				return err
			}
		case barrier.EndOfInput:
			// handled by the caller, after the final checkpoint completed
		}
	}
	return nil
}

// finish ends a task whose inputs all ended: it waits until a final
// checkpoint it took completed (so sinks commit), then ends its outputs.
func (t *task) finish(ctx context.Context) error {
	for t.final != nil {
		if err := t.wait(ctx, nil); err != nil {
			return err
		}
		if _, err := t.handleMailbox(); err != nil {
			return err
		}
	}
	if err := t.emit(envelope{kind: evEndOfInput}); err != nil {
		return err
	}
	return nil
}

// checkpoint snapshots every link for barrier b, forwards b and acks,
// telling how long the barriers took to align.
func (t *task) checkpoint(ctx context.Context, b barrier.Barrier, aligned time.Duration) error {
	start := time.Now()
	snaps := make([]state.SubtaskSnapshot, len(t.links))
	var persists []func() error
	for k, l := range t.links {
		n := t.chain.nodes[k]
		var dir string
		if n.keyed {
			var err error
			if dir, err = t.att.storage.SubtaskDir(b.ID, n.uid, t.subtask); err != nil {
				return err
			}
		}
		snap, persist, err := l.snapshot(b.ID, dir)
		if err != nil {
			return fmt.Errorf("snapshot %q subtask %d for checkpoint %d: %w", n.uid, t.subtask, b.ID, err)
		}
		snap.Subtask = t.subtask
		if snap.Unions == nil {
			snap.Unions = map[string][][]byte{}
		}
		snap.Unions[reservedUnion] = [][]byte{t.encodeWatermark()}
		snaps[k] = snap
		if persist != nil {
			persists = append(persists, func() error {
				files, err := persist()
				if err != nil {
					return fmt.Errorf("persist state of %q subtask %d for checkpoint %d: %w", n.uid, t.subtask, b.ID, err)
				}
				snaps[k].Files = state.CheckpointFiles(n.uid, t.subtask, files)
				return nil
			})
		}
	}
	if t.src != nil {
		if g := t.ctxs[0].gate; g != nil {
			g.snapshotted()
		}
	}
	if err := t.emit(envelope{kind: evBarrier, barrier: b}); err != nil {
		return err
	}
	if b.Final {
		id := b.ID
		t.final = &id
	}
	t.att.job.metrics.syncSeconds.Observe(time.Since(start).Seconds())
	t.att.coord.ack(ctx, t, b.ID, snaps, persists, aligned)
	return nil
}

// handleMailbox applies the coordinator's notices. done is true when a
// source task finished its final checkpoint and ended its outputs.
func (t *task) handleMailbox() (done bool, err error) {
	select {
	case <-t.mailbox.signal:
	default:
		return false, nil
	}
	n := t.mailbox.take()
	if n.hasDone && (!t.hasDone || n.completed > t.lastDone) {
		t.lastDone, t.hasDone = n.completed, true
		for k, l := range t.links {
			if err := l.notifyComplete(n.completed); err != nil {
				return false, fmt.Errorf("notify %q subtask %d that checkpoint %d completed: %w",
					t.chain.nodes[k].uid, t.subtask, n.completed, err)
			}
		}
		if t.waitComplete != nil && n.completed >= *t.waitComplete {
			t.waitComplete = nil
		}
		if t.final != nil && n.completed >= *t.final {
			t.final = nil
			if t.src != nil {
				return true, t.emit(envelope{kind: evEndOfInput})
			}
		}
	}
	if n.hasAborted {
		if t.waitComplete != nil && n.aborted >= *t.waitComplete {
			return false, fmt.Errorf("initial checkpoint %d failed", *t.waitComplete)
		}
		if t.final != nil && n.aborted >= *t.final {
			return false, fmt.Errorf("final checkpoint %d failed", *t.final)
		}
		if t.aligner != nil {
			// An alignment of it, or of an older one, ends here.
			if err := t.perform(t.att.ctx, t.aligner.OnAborted(n.aborted)); err != nil {
				return false, err
			}
		}
	}
	if n.trigger != nil {
		if err := t.checkpoint(t.att.ctx, *n.trigger, 0); err != nil {
			return false, err
		}
	}
	return false, nil
}

// wait blocks until the mailbox, the gate (if not nil), a timer, the
// alignment timeout or ctx.
func (t *task) wait(ctx context.Context, gate <-chan struct{}) error {
	var timerC <-chan time.Time
	at, ok := t.timers.next()
	if dl, aligning := t.alignmentDeadline(); aligning && (!ok || dl.Before(at)) {
		at, ok = dl, true
	}
	if ok {
		d := time.Until(at)
		if d <= 0 {
			return nil
		}
		tm := time.NewTimer(d)
		defer tm.Stop()
		timerC = tm.C
	}
	t.stat.time.enter(waitingForInput)
	defer t.stat.time.enter(working)
	select {
	case <-t.mailbox.signal:
		signal(t.mailbox.signal) // leave it for handleMailbox
	case <-gate:
	case <-timerC:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (t *task) fireTimers() error {
	at, ok := t.timers.next()
	if !ok {
		return nil
	}
	now := time.Now()
	if now.Before(at) {
		return nil
	}
	for k, due := range t.timers.at {
		if due.IsZero() || now.Before(due) {
			continue
		}
		t.timers.at[k] = time.Time{}
		if th := t.links[k].timerHandler(); th != nil {
			if err := th.OnTimer(now); err != nil {
				return fmt.Errorf("timer of %q subtask %d: %w", t.chain.nodes[k].uid, t.subtask, err)
			}
		}
	}
	return nil
}

func (t *task) flushOuts() error {
	for _, o := range t.outs {
		if err := o.flush(); err != nil {
			return err
		}
	}
	return nil
}

func (t *task) emit(env envelope) error {
	for _, o := range t.outs {
		if err := o.event(env); err != nil {
			return err
		}
	}
	return nil
}
