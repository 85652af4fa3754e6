package runtime

import (
	"fmt"
	"sort"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
)

// coordEventKind is what happened to the coordinator.
type coordEventKind uint8

const (
	// coordStart: the attempt begins; the initial checkpoint is triggered
	// at once when the sources wait for it. gated: the sources have cut
	// gates (CutGate), so no other checkpoint is triggered before
	// coordAtCut.
	coordStart coordEventKind = iota + 1
	// coordTick: time passed (the timer of wake fired): a checkpoint past
	// its deadline is aborted, a periodic one is triggered when due.
	coordTick
	// coordAck: task acked checkpoint id with the snapshots of its chain.
	coordAck
	// coordDecline: checkpoint id cannot complete (a task's persist failed,
	// an alignment was aborted); err says why.
	coordDecline
	// coordTriggerFailed: the folder of the checkpoint a trigger action
	// named could not be created; err says why. No task saw its barrier.
	coordTriggerFailed
	// coordPersisted: the metadata of the checkpoint a persist action named
	// was written (err nil) or not.
	coordPersisted
	// coordSourceFinished: a source subtask read its last record.
	coordSourceFinished
	// coordStop: Job.Stop was called.
	coordStop
	// coordEnd: the attempt ended (failure, cancellation or the job's end).
	coordEnd
	// coordAtCut: every cut gate is open: the sources are where a
	// checkpoint may cut their input, and hold there until its barrier.
	coordAtCut
)

// coordEvent is one input of the coordinator's state machine. now is the
// time of the event: the machine reads no clock.
type coordEvent struct {
	kind  coordEventKind
	now   time.Time
	id    barrier.CheckpointID // ack, decline, trigger failed, persisted
	task  int                  // ack: the task's index
	ops   []ackedOp            // ack: one per link of the task's chain
	err   error                // decline, trigger failed, persisted
	cause abortCause           // decline (causeDeclined if empty)
	size  int64                // persisted: bytes of the metadata file
	gated bool                 // start: the sources have cut gates
	eager bool                 // start: one of the gates is eager
}

// abortCause classifies why a checkpoint was aborted: the reason label of
// ebbflow_checkpoint_aborts_total and of the runner's log line.
type abortCause string

const (
	causeTimeout          abortCause = "timeout"           // not completed within CheckpointOptions.Timeout
	causeAlignmentTimeout abortCause = "alignment_timeout" // a subtask waited longer than AlignmentTimeout for a barrier
	causeDeclined         abortCause = "declined"          // a subtask could not take its part (persist failed, alignment aborted)
	causeMetadata         abortCause = "metadata"          // writing the metadata failed
	causeTriggerFailed    abortCause = "trigger_failed"    // its folder could not be created (the driver's)
	causeAttemptEnded     abortCause = "attempt_ended"     // the job attempt ended with it in flight
)

var abortCauses = []abortCause{causeTimeout, causeAlignmentTimeout, causeDeclined, causeMetadata, causeTriggerFailed, causeAttemptEnded}

// ackedOp is the snapshot of one operator subtask carried by an ack.
type ackedOp struct {
	uid         string
	parallelism int
	snap        state.SubtaskSnapshot
}

// coordActionKind is what the coordinator's driver must do.
type coordActionKind uint8

const (
	// actTrigger: create the folder of checkpoint barrier.ID, then close
	// the cut gates and post the barrier to every source (or report
	// coordTriggerFailed).
	actTrigger coordActionKind = iota + 1
	// actPersist: write md, then report coordPersisted.
	actPersist
	// actComplete: checkpoint barrier.ID completed (size bytes, after
	// duration): tell every task, prune old checkpoints.
	actComplete
	// actAbort: checkpoint barrier.ID was aborted (err): tell every task,
	// remove its folder. Tasks waiting for the initial or the final
	// checkpoint fail on the notice.
	actAbort
	// actFinalWanted: a final checkpoint is due (reason).
	actFinalWanted
	// actFail: fail the attempt with err.
	actFail
)

// coordAction is one output of the coordinator's state machine, performed
// in the order returned.
type coordAction struct {
	kind     coordActionKind
	barrier  barrier.Barrier // trigger, complete, abort
	md       state.Metadata  // persist
	size     int64           // complete
	duration time.Duration   // complete
	err      error           // abort, fail
	cause    abortCause      // abort
	reason   string          // final wanted
}

func (a coordAction) String() string {
	switch a.kind {
	case actTrigger:
		s := fmt.Sprintf("trigger %d", a.barrier.ID)
		if a.barrier.Final {
			s += " final"
		}
		if a.barrier.Initial {
			s += " initial"
		}
		return s
	case actPersist:
		uids := make([]string, 0, len(a.md.Operators))
		for uid, op := range a.md.Operators {
			uids = append(uids, fmt.Sprintf("%s:%d/%d", uid, len(op.Subtasks), op.Parallelism))
		}
		sort.Strings(uids)
		return fmt.Sprintf("persist %d %v", a.md.ID, uids)
	case actComplete:
		return fmt.Sprintf("complete %d after %s, %d bytes", a.barrier.ID, a.duration, a.size)
	case actAbort:
		return fmt.Sprintf("abort %d (%s): %v", a.barrier.ID, a.cause, a.err)
	case actFinalWanted:
		return "final wanted: " + a.reason
	case actFail:
		return fmt.Sprintf("fail: %v", a.err)
	}
	return fmt.Sprintf("coordAction(%d)", a.kind)
}

// coordConfig is what the coordinator's state machine decides from.
type coordConfig struct {
	job            string
	maxParallelism int
	checkpoint     CheckpointOptions
	tasks, sources int
	next           barrier.CheckpointID // id of the first checkpoint
	// initial: the sources wait for the first checkpoint before reading
	// (a fresh start); it is triggered on coordStart, and a failure to
	// trigger it fails the attempt.
	initial bool
}

// inFlight is the checkpoint the coordinator waits for.
type inFlight struct {
	barrier  barrier.Barrier
	deadline time.Time
	acked    map[int]bool
	md       state.Metadata
	size     int64 // bytes of the state files the acks reference
	persist  bool  // every task acked; the metadata is being written
	cut      bool  // it was triggered at a cut (gated): a failed trigger leaves the sources there
}

// coordMachine is the checkpoint coordinator's state machine: when to
// trigger (every Interval, at least MinPause after the previous checkpoint
// ended, at most one in flight, the final one as soon as none is), which
// acks count, when a checkpoint completes or aborts. It performs no IO,
// reads no clock and starts no goroutine: its driver (coordinator) turns
// channel receives and timers into events and performs the actions. It is
// not safe for concurrent use.
type coordMachine struct {
	cfg          coordConfig
	nextID       barrier.CheckpointID
	pending      *inFlight
	lastTrigger  time.Time
	lastEnd      time.Time
	finalWanted  bool
	finalStarted bool
	active       int // sources still reading
	// gated: the sources have cut gates; atCut: they are all open (no
	// checkpoint was triggered since coordAtCut); eager: the cuts are due
	// at once, and a final checkpoint does not wait for one.
	gated, atCut, eager bool
}

func newCoordMachine(cfg coordConfig) *coordMachine {
	return &coordMachine{cfg: cfg, nextID: cfg.next, active: cfg.sources}
}

// wake returns when the machine wants a coordTick: the deadline of the
// checkpoint in flight, or the time the next periodic one is due.
func (m *coordMachine) wake() (time.Time, bool) {
	if m.pending != nil {
		return m.pending.deadline, true
	}
	return m.nextPeriodic()
}

// nextPeriodic returns when the next periodic checkpoint is due: never
// while gated sources are not at a cut (coordAtCut tells when they are),
// nor once the final one is wanted (it goes first). With eager gates a cut
// is due at once (after MinPause), whatever the interval.
func (m *coordMachine) nextPeriodic() (time.Time, bool) {
	if m.pending != nil || m.finalWanted || (m.gated && !m.atCut) {
		return time.Time{}, false
	}
	var at time.Time
	switch {
	case m.eager:
	case m.cfg.checkpoint.Interval <= 0:
		return time.Time{}, false
	default:
		at = m.lastTrigger.Add(m.cfg.checkpoint.Interval)
	}
	if p := m.lastEnd.Add(m.cfg.checkpoint.MinPause); p.After(at) {
		at = p
	}
	return at, true
}

// step applies ev and returns the actions it calls for.
func (m *coordMachine) step(ev coordEvent) []coordAction {
	var acts []coordAction
	switch ev.kind {
	case coordStart:
		m.gated, m.eager = ev.gated, ev.eager
		if m.cfg.initial {
			acts = m.trigger(acts, ev.now, false)
		}
	case coordTick:
		if p := m.pending; p != nil && !ev.now.Before(p.deadline) {
			acts = m.abort(acts, ev.now, causeTimeout, fmt.Errorf("timed out after %s", m.cfg.checkpoint.Timeout))
		}
		if at, ok := m.nextPeriodic(); ok && !ev.now.Before(at) {
			acts = m.trigger(acts, ev.now, false)
		}
	case coordAtCut:
		m.atCut = true
		if at, ok := m.nextPeriodic(); ok && !ev.now.Before(at) {
			acts = m.trigger(acts, ev.now, false)
		}
	case coordAck:
		acts = m.ack(acts, ev)
	case coordDecline:
		if m.isPending(ev.id) {
			cause := ev.cause
			if cause == "" {
				cause = causeDeclined
			}
			acts = m.abort(acts, ev.now, cause, ev.err)
		}
	case coordTriggerFailed:
		if m.isPending(ev.id) {
			final := m.pending.barrier.Final
			// No source saw the barrier: those at a cut are still there.
			m.atCut = m.atCut || m.pending.cut
			m.pending = nil
			m.lastEnd = ev.now
			if final || (m.cfg.initial && ev.id == m.cfg.next) {
				acts = append(acts, coordAction{kind: actFail, err: fmt.Errorf("trigger checkpoint %d: %w", ev.id, ev.err)})
			}
		}
	case coordPersisted:
		if m.isPending(ev.id) {
			if ev.err != nil {
				acts = m.abort(acts, ev.now, causeMetadata, fmt.Errorf("write metadata: %w", ev.err))
			} else {
				p := m.pending
				m.pending = nil
				m.lastEnd = ev.now
				acts = append(acts, coordAction{kind: actComplete, barrier: p.barrier, size: p.size + ev.size, duration: ev.now.Sub(p.barrier.Time)})
			}
		}
	case coordSourceFinished:
		m.active--
		if m.active == 0 {
			m.finalWanted = true
			acts = append(acts, coordAction{kind: actFinalWanted, reason: "all sources ended; taking the final checkpoint"})
		}
	case coordStop:
		m.finalWanted = true
		acts = append(acts, coordAction{kind: actFinalWanted, reason: "stop requested; taking the final checkpoint"})
	case coordEnd:
		if m.pending != nil {
			acts = m.abort(acts, ev.now, causeAttemptEnded, fmt.Errorf("job attempt ended"))
		}
		return acts
	}
	if m.finalWanted && m.pending == nil && !m.finalStarted && m.cutReady() {
		acts = m.trigger(acts, ev.now, true)
	}
	return acts
}

// cutReady reports whether the final checkpoint may cut the sources' input
// now: eager gates do not hold it.
func (m *coordMachine) cutReady() bool { return !m.gated || m.atCut || m.eager }

func (m *coordMachine) isPending(id barrier.CheckpointID) bool {
	return m.pending != nil && m.pending.barrier.ID == id
}

func (m *coordMachine) trigger(acts []coordAction, now time.Time, final bool) []coordAction {
	id := m.nextID
	m.nextID++
	m.lastTrigger = now
	if final {
		m.finalStarted = true
	}
	b := barrier.Barrier{ID: id, Time: now, Final: final, Initial: m.cfg.initial && id == m.cfg.next}
	// Every trigger closes the gates (the driver closes them before the
	// sources see the barrier).
	cut := m.atCut
	m.atCut = false
	m.pending = &inFlight{barrier: b, deadline: now.Add(m.cfg.checkpoint.Timeout), acked: map[int]bool{}, cut: cut,
		md: state.Metadata{Version: 1, Job: m.cfg.job, ID: id, Time: now, Final: final,
			MaxParallelism: m.cfg.maxParallelism, Operators: map[string]state.OperatorSnapshot{}}}
	return append(acts, coordAction{kind: actTrigger, barrier: b})
}

func (m *coordMachine) ack(acts []coordAction, ev coordEvent) []coordAction {
	p := m.pending
	if p == nil || p.barrier.ID != ev.id || p.persist {
		return acts // an ack for an aborted checkpoint
	}
	p.acked[ev.task] = true
	for _, a := range ev.ops {
		op := p.md.Operators[a.uid]
		op.Parallelism = a.parallelism
		op.Subtasks = append(op.Subtasks, a.snap)
		p.md.Operators[a.uid] = op
	}
	if len(p.acked) < m.cfg.tasks {
		return acts
	}
	for uid, op := range p.md.Operators {
		sort.Slice(op.Subtasks, func(i, j int) bool { return op.Subtasks[i].Subtask < op.Subtasks[j].Subtask })
		p.md.Operators[uid] = op
		for _, s := range op.Subtasks {
			for _, f := range s.Files {
				p.size += f.Size
			}
		}
	}
	p.persist = true
	return append(acts, coordAction{kind: actPersist, md: p.md})
}

// abort ends the checkpoint in flight. An aborted final checkpoint is not
// retried: the tasks waiting for it fail on the abort notice and the
// attempt ends.
func (m *coordMachine) abort(acts []coordAction, now time.Time, cause abortCause, err error) []coordAction {
	p := m.pending
	m.pending = nil
	m.lastEnd = now
	return append(acts, coordAction{kind: actAbort, barrier: p.barrier, err: err, cause: cause})
}
