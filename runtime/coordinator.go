package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
)

// ackMsg is a task's acknowledgement of a checkpoint with its snapshots,
// one per link of its chain, or, with err set, a decline.
type ackMsg struct {
	id    barrier.CheckpointID
	task  *task
	snaps []state.SubtaskSnapshot
	err   error // the checkpoint is declined: persisting failed, or an alignment was aborted
}

// pendingCheckpoint collects the acks of the checkpoint in flight.
type pendingCheckpoint struct {
	barrier barrier.Barrier
	dir     string
	acked   map[*task]bool
	md      state.Metadata
	timeout *time.Timer
}

// coordinator triggers checkpoints at the sources, collects acks, writes the
// metadata of completed checkpoints and tells every task. It runs on one
// goroutine owned by the attempt; tasks reach it only through buffered
// channels (a task waits while one is full: the coordinator drains them and
// never blocks on a task) and it reaches tasks only through their mailboxes,
// which never block.
type coordinator struct {
	att      *attempt
	storage  *state.Storage
	opts     CheckpointOptions
	nextID   barrier.CheckpointID
	tasks    []*task
	sources  []*task
	acks     chan ackMsg // acks and declines
	finished chan *task

	pending       *pendingCheckpoint
	lastEnd       time.Time
	lastTrigger   time.Time
	finalWanted   bool
	finalStarted  bool
	sourcesActive int
}

func newCoordinator(att *attempt, storage *state.Storage, next barrier.CheckpointID) *coordinator {
	c := &coordinator{att: att, storage: storage, opts: att.job.opts.Checkpoint, nextID: next}
	return c
}

func (c *coordinator) setTasks(tasks []*task) {
	c.tasks = tasks
	for _, t := range tasks {
		if t.src != nil {
			c.sources = append(c.sources, t)
		}
	}
	c.sourcesActive = len(c.sources)
	c.acks = make(chan ackMsg, 2*len(tasks))
	c.finished = make(chan *task, len(c.sources))
}

// ack is called by a task after snapshotting; persists run on a goroutine
// owned by the attempt, then the ack is delivered.
func (c *coordinator) ack(ctx context.Context, t *task, id barrier.CheckpointID, snaps []state.SubtaskSnapshot, persists []func() error) {
	send := func(err error) { c.send(ctx, ackMsg{id: id, task: t, snaps: snaps, err: err}) }
	if len(persists) == 0 {
		send(nil)
		return
	}
	c.att.goAsync(func() {
		var err error
		for _, p := range persists {
			if err = p(); err != nil {
				break
			}
		}
		send(err)
	})
}

// decline tells the coordinator that checkpoint id cannot complete. Like an
// ack it waits for room on the channel (the coordinator never blocks on a
// task, so it always drains it): a dropped decline would leave the
// checkpoint pending until its timeout.
func (c *coordinator) decline(ctx context.Context, id barrier.CheckpointID, err error) {
	c.send(ctx, ackMsg{id: id, err: err})
}

// send delivers an ack or a decline, unless ctx ends first.
func (c *coordinator) send(ctx context.Context, m ackMsg) {
	select {
	case c.acks <- m:
	case <-ctx.Done():
	}
}

func (c *coordinator) sourceFinished(t *task) { c.finished <- t }

// run is the coordinator goroutine. It returns when ctx is done.
func (c *coordinator) run(ctx context.Context) {
	log := c.att.log
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.resetTimer(timer)
		var timeoutC <-chan time.Time
		if c.pending != nil {
			timeoutC = c.pending.timeout.C
		}
		select {
		case <-ctx.Done():
			if c.pending != nil {
				c.pending.timeout.Stop()
				c.abortPending(errors.New("job attempt ended"))
			}
			return
		case a := <-c.acks:
			c.onAck(a)
		case <-c.finished:
			c.sourcesActive--
			if c.sourcesActive == 0 {
				log.Info("all sources ended; taking the final checkpoint")
				c.finalWanted = true
			}
		case <-c.att.job.stopReq:
			log.Info("stop requested; taking the final checkpoint")
			c.finalWanted = true
			c.att.stopping.Store(true)
		case <-timeoutC:
			c.abortPending(fmt.Errorf("timed out after %s", c.opts.Timeout))
		case <-timer.C:
			if c.pending == nil && !c.finalStarted {
				c.trigger(false)
			}
		}
		if c.finalWanted && c.pending == nil && !c.finalStarted {
			c.trigger(true)
		}
	}
}

// resetTimer arms timer for the next periodic trigger.
func (c *coordinator) resetTimer(timer *time.Timer) {
	timer.Stop()
	if c.opts.Interval <= 0 || c.pending != nil || c.finalStarted {
		return
	}
	at := c.lastTrigger.Add(c.opts.Interval)
	if p := c.lastEnd.Add(c.opts.MinPause); p.After(at) {
		at = p
	}
	timer.Reset(max(time.Until(at), 0))
}

func (c *coordinator) trigger(final bool) {
	id := c.nextID
	c.nextID++
	now := time.Now()
	c.lastTrigger = now
	dir, err := c.storage.Dir(id)
	if err != nil {
		c.att.log.Error("checkpoint not triggered", "checkpoint", id, "err", err)
		c.att.job.metrics.checkpoints.WithLabelValues("failed").Inc()
		c.lastEnd = now
		if final || (c.att.waitFirst && id == c.att.firstID) {
			c.att.fail(fmt.Errorf("trigger checkpoint %d: %w", id, err))
		}
		return
	}
	b := barrier.Barrier{ID: id, Time: now, Final: final}
	if final {
		c.finalStarted = true
	}
	md := state.Metadata{Version: 1, Job: c.att.job.opts.Name, ID: id, Time: now, Final: final,
		MaxParallelism: c.att.job.opts.MaxParallelism, Operators: map[string]state.OperatorSnapshot{}}
	c.pending = &pendingCheckpoint{barrier: b, dir: dir, acked: map[*task]bool{}, md: md,
		timeout: time.NewTimer(c.opts.Timeout)}
	c.att.job.metrics.inProgress.Set(1)
	c.att.log.Debug("checkpoint triggered", "checkpoint", id, "final", final)
	for _, s := range c.sources {
		s.mailbox.postTrigger(b)
	}
}

func (c *coordinator) onAck(a ackMsg) {
	p := c.pending
	if p == nil || p.barrier.ID != a.id {
		return // an ack for an aborted checkpoint
	}
	if a.err != nil {
		c.abortPending(a.err)
		return
	}
	p.acked[a.task] = true
	for k, n := range a.task.chain.nodes {
		op := p.md.Operators[n.uid]
		op.Parallelism = n.parallelism
		op.Subtasks = append(op.Subtasks, a.snaps[k])
		p.md.Operators[n.uid] = op
	}
	if len(p.acked) < len(c.tasks) {
		return
	}
	p.timeout.Stop()
	var size int64
	for uid, op := range p.md.Operators {
		sort.Slice(op.Subtasks, func(i, j int) bool { return op.Subtasks[i].Subtask < op.Subtasks[j].Subtask })
		p.md.Operators[uid] = op
		for _, s := range op.Subtasks {
			for _, f := range s.Files {
				size += f.Size
			}
		}
	}
	if err := c.storage.Complete(p.md); err != nil {
		c.abortPending(fmt.Errorf("write metadata: %w", err))
		return
	}
	c.pending = nil
	now := time.Now()
	c.lastEnd = now
	m := c.att.job.metrics
	d := now.Sub(p.barrier.Time)
	m.inProgress.Set(0)
	m.checkpoints.WithLabelValues("completed").Inc()
	m.duration.Observe(d.Seconds())
	m.lastDuration.Set(d.Seconds())
	m.lastSize.Set(float64(size))
	m.lastID.Set(float64(p.barrier.ID))
	m.lastCompleted.Set(float64(now.UnixNano()) / 1e9)
	// One line a checkpoint is noise at INFO (the runner's periodic summary
	// counts them); the final one, which ends a job, is worth saying.
	level := slog.LevelDebug
	if p.barrier.Final {
		level = slog.LevelInfo
	}
	c.att.log.Log(context.Background(), level, "checkpoint completed", "checkpoint", p.barrier.ID, "duration", d, "bytes", size, "final", p.barrier.Final)
	c.att.checkpointCompleted(p.barrier.ID)
	for _, t := range c.tasks {
		t.mailbox.postComplete(p.barrier.ID)
	}
	if err := c.storage.Retain(c.opts.Retain); err != nil {
		c.att.log.Warn("prune old checkpoints", "err", err)
	}
}

func (c *coordinator) abortPending(cause error) {
	p := c.pending
	c.pending = nil
	p.timeout.Stop()
	c.lastEnd = time.Now()
	m := c.att.job.metrics
	m.inProgress.Set(0)
	m.checkpoints.WithLabelValues("failed").Inc()
	c.att.log.Warn("checkpoint aborted", "checkpoint", p.barrier.ID, "cause", cause)
	for _, t := range c.tasks {
		t.mailbox.postAbort(p.barrier.ID)
	}
	if err := c.storage.Abort(p.barrier.ID); err != nil {
		c.att.log.Warn("clean up aborted checkpoint", "checkpoint", p.barrier.ID, "err", err)
	}
	// An aborted final checkpoint is not retried: the tasks waiting for it
	// fail on the abort notice and the attempt ends.
}
