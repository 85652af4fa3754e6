package runtime

import (
	"context"
	"log/slog"
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
	err   error      // the checkpoint is declined: persisting failed, or an alignment was aborted
	cause abortCause // of a decline
	// aligned is how long the task waited for the barriers of its other
	// inputs before it could snapshot (0: one input, or they came at once).
	aligned time.Duration
}

// checkpointStore is what the coordinator needs of the checkpoint storage
// (state.Storage implements it).
type checkpointStore interface {
	// Dir creates (if needed) the folder of checkpoint id.
	Dir(id barrier.CheckpointID) (string, error)
	// Complete writes the metadata of checkpoint md.ID, atomically, and
	// returns its size.
	Complete(md state.Metadata) (int64, error)
	// Abort removes the folder of checkpoint id.
	Abort(id barrier.CheckpointID) error
	// Retain keeps the k newest completed checkpoints.
	Retain(k int) error
}

// coordinator drives the checkpoint state machine (coordMachine): it turns
// acks, declines, finished sources, stop requests and timers into events,
// and performs the actions (posting to mailboxes, writing metadata,
// metrics, logs). It runs on one goroutine owned by the attempt; tasks reach
// it only through buffered channels (a task waits while one is full: the
// coordinator drains them and never blocks on a task) and it reaches tasks
// only through their mailboxes, which never block.
type coordinator struct {
	att      *attempt
	storage  checkpointStore
	opts     CheckpointOptions
	m        *coordMachine
	tasks    []*task
	index    map[*task]int
	sources  []*task
	acks     chan ackMsg // acks and declines
	finished chan *task
	cuts     *cutGates // the sources' cut gates (Context.CutGate)
	// aligned is, per checkpoint in flight, the longest alignment its acks
	// reported (CheckpointInfo.Alignment once it completes).
	aligned map[barrier.CheckpointID]time.Duration
}

func newCoordinator(att *attempt, storage checkpointStore) *coordinator {
	return &coordinator{att: att, storage: storage, opts: att.job.opts.Checkpoint, cuts: newCutGates()}
}

// setTasks gives the coordinator the attempt's tasks and its state machine
// its configuration: the first checkpoint is next, and with initial the
// sources wait for it.
func (c *coordinator) setTasks(tasks []*task, next barrier.CheckpointID, initial bool) {
	c.tasks = tasks
	c.index = make(map[*task]int, len(tasks))
	for i, t := range tasks {
		c.index[t] = i
		if t.src != nil {
			c.sources = append(c.sources, t)
		}
	}
	c.acks = make(chan ackMsg, 2*len(tasks))
	c.aligned = map[barrier.CheckpointID]time.Duration{}
	c.finished = make(chan *task, len(c.sources))
	opts := c.att.job.opts
	c.m = newCoordMachine(coordConfig{job: opts.Name, maxParallelism: opts.MaxParallelism, checkpoint: c.opts,
		tasks: len(tasks), sources: len(c.sources), next: next, initial: initial})
}

// ack is called by a task after snapshotting; persists run on a goroutine
// owned by the attempt, then the ack is delivered.
func (c *coordinator) ack(ctx context.Context, t *task, id barrier.CheckpointID, snaps []state.SubtaskSnapshot, persists []func() error, aligned time.Duration) {
	send := func(err error) {
		c.send(ctx, ackMsg{id: id, task: t, snaps: snaps, err: err, cause: causeDeclined, aligned: aligned})
	}
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

// decline tells the coordinator that checkpoint id cannot complete, for
// cause (err says more). Like an ack it waits for room on the channel (the
// coordinator never blocks on a task, so it always drains it): a dropped
// decline would leave the checkpoint pending until its timeout.
func (c *coordinator) decline(ctx context.Context, id barrier.CheckpointID, cause abortCause, err error) {
	c.send(ctx, ackMsg{id: id, err: err, cause: cause})
}

// send delivers an ack or a decline, unless ctx ends first.
func (c *coordinator) send(ctx context.Context, m ackMsg) {
	select {
	case c.acks <- m:
	case <-ctx.Done():
	}
}

func (c *coordinator) sourceFinished(t *task) { c.finished <- t }

// start triggers the initial checkpoint if the sources wait for it. It is
// called after the tasks opened (and registered their cut gates), before
// the coordinator goroutine starts.
func (c *coordinator) start() {
	_, gates := c.cuts.count()
	c.step(coordEvent{kind: coordStart, gated: gates > 0, eager: c.cuts.eager.Load()})
}

// run is the coordinator goroutine. It returns when ctx is done.
func (c *coordinator) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Stop()
		if at, ok := c.m.wake(); ok {
			timer.Reset(max(time.Until(at), 0))
		}
		select {
		case <-ctx.Done():
			c.step(coordEvent{kind: coordEnd})
			return
		case a := <-c.acks:
			if a.err != nil {
				c.step(coordEvent{kind: coordDecline, id: a.id, err: a.err, cause: a.cause})
				continue
			}
			if a.aligned > c.aligned[a.id] {
				c.aligned[a.id] = a.aligned
			}
			c.att.job.board.acked(a.id, a.task.name())
			ops := make([]ackedOp, len(a.task.chain.nodes))
			for k, n := range a.task.chain.nodes {
				ops[k] = ackedOp{uid: n.uid, parallelism: n.parallelism, snap: a.snaps[k]}
			}
			c.step(coordEvent{kind: coordAck, id: a.id, task: c.index[a.task], ops: ops})
		case <-c.finished:
			c.step(coordEvent{kind: coordSourceFinished})
		case <-c.att.job.stopReq:
			c.att.stopping.Store(true)
			c.att.job.board.setState(StateStopping, nil, nil)
			c.step(coordEvent{kind: coordStop})
		case <-timer.C:
			c.step(coordEvent{kind: coordTick})
		case <-c.cuts.ready:
			// A stale signal (the gates were closed since) finds them
			// closed.
			if c.cuts.allOpen() {
				c.step(coordEvent{kind: coordAtCut})
			}
		}
	}
}

// step feeds ev, stamped with the current time, to the state machine and
// performs the actions it returns.
func (c *coordinator) step(ev coordEvent) {
	ev.now = time.Now()
	for _, a := range c.m.step(ev) {
		c.perform(a)
	}
}

func (c *coordinator) perform(a coordAction) {
	log := c.att.log
	m := c.att.job.metrics
	id := a.barrier.ID
	switch a.kind {
	case actTrigger:
		if _, err := c.storage.Dir(id); err != nil {
			log.Error("checkpoint not triggered", "checkpoint", id, "err", err)
			m.checkpoints.WithLabelValues("failed").Inc()
			m.aborts.WithLabelValues(string(causeTriggerFailed)).Inc()
			// No task saw it, but a listener counting checkpoints hears
			// of every one.
			c.att.job.board.aborted(a.barrier, err)
			c.step(coordEvent{kind: coordTriggerFailed, id: id, err: err})
			return
		}
		m.inProgress.Set(1)
		log.Debug("checkpoint triggered", "checkpoint", id, "final", a.barrier.Final)
		// Closed before any source sees the barrier: a source opens its
		// gate again only after its Snapshot of this checkpoint.
		c.cuts.closeAll()
		for _, s := range c.sources {
			s.mailbox.postTrigger(a.barrier)
		}
		waiting := make([]string, len(c.tasks))
		for i, t := range c.tasks {
			waiting[i] = t.name()
		}
		c.att.job.board.triggered(a.barrier, waiting)
	case actPersist:
		size, err := c.storage.Complete(a.md)
		c.step(coordEvent{kind: coordPersisted, id: a.md.ID, size: size, err: err})
	case actComplete:
		d := a.duration
		m.inProgress.Set(0)
		m.checkpoints.WithLabelValues("completed").Inc()
		m.duration.Observe(d.Seconds())
		m.lastDuration.Set(d.Seconds())
		m.lastSize.Set(float64(a.size))
		m.lastID.Set(float64(id))
		m.lastCompleted.Set(float64(a.barrier.Time.Add(d).UnixNano()) / 1e9)
		// One line a checkpoint is noise at INFO (the runner's periodic
		// summary counts them); the final one, which ends a job, is worth
		// saying.
		level := slog.LevelDebug
		if a.barrier.Final {
			level = slog.LevelInfo
		}
		log.Log(context.Background(), level, "checkpoint completed", "checkpoint", id, "duration", d, "bytes", a.size, "final", a.barrier.Final)
		c.att.checkpointCompleted(id)
		c.att.job.board.completed(a.barrier, d, a.size, c.aligned[id])
		c.forgetAligned(id)
		for _, t := range c.tasks {
			t.mailbox.postComplete(id)
		}
		if err := c.storage.Retain(c.opts.Retain); err != nil {
			log.Warn("prune old checkpoints", "err", err)
		}
	case actAbort:
		c.forgetAligned(id)
		m.inProgress.Set(0)
		m.checkpoints.WithLabelValues("failed").Inc()
		m.aborts.WithLabelValues(string(a.cause)).Inc()
		log.Warn("checkpoint aborted", "checkpoint", id, "reason", a.cause, "cause", a.err)
		c.att.job.board.aborted(a.barrier, a.err)
		for _, t := range c.tasks {
			t.mailbox.postAbort(id)
		}
		if err := c.storage.Abort(id); err != nil {
			log.Warn("clean up aborted checkpoint", "checkpoint", id, "err", err)
		}
	case actFinalWanted:
		log.Info(a.reason)
	case actFail:
		c.att.fail(a.err)
	}
}

// forgetAligned drops the alignment times of checkpoint id and older ones
// (completed, aborted or subsumed: no ack of them counts any more).
func (c *coordinator) forgetAligned(id barrier.CheckpointID) {
	for k := range c.aligned {
		if k <= id {
			delete(c.aligned, k)
		}
	}
}
