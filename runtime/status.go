package runtime

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/prometheus/client_golang/prometheus"
)

// JobState is the lifecycle state of a job, named after Flink's job states.
type JobState string

const (
	// StateCreated: NewJob was called, Run not yet.
	StateCreated JobState = "created"
	// StateInitializing: an attempt restores its checkpoint (if any) and
	// opens its operators; no record flows yet (Flink's INITIALIZING).
	StateInitializing JobState = "initializing"
	// StateRunning: the attempt's tasks run.
	StateRunning JobState = "running"
	// StateStopping: Stop was called; the final checkpoint is on its way.
	StateStopping JobState = "stopping"
	// StateRestarting: an attempt failed; the next one starts after the
	// backoff, from the latest completed checkpoint.
	StateRestarting JobState = "restarting"
	// StateFinished: Run returned nil (bounded sources ended or Stop, with
	// the final checkpoint completed).
	StateFinished JobState = "finished"
	// StateFailed: Run returned a failure (restarts used up, a permanent
	// error, a failed restore, an invalid job).
	StateFailed JobState = "failed"
	// StateCanceled: Run's context was cancelled; the state stays at the
	// last completed checkpoint.
	StateCanceled JobState = "canceled"
)

// TaskState is the state of one subtask in the current attempt.
type TaskState string

const (
	TaskCreated  TaskState = "created"  // built and opening, not yet running
	TaskRunning  TaskState = "running"  // its goroutine runs
	TaskFinished TaskState = "finished" // ended after its final checkpoint
	TaskFailed   TaskState = "failed"   // ended with an error
	TaskCanceled TaskState = "canceled" // ended because the attempt did
)

var taskStates = []TaskState{TaskCreated, TaskRunning, TaskFinished, TaskFailed, TaskCanceled}

// CheckpointInfo describes a checkpoint in a JobStatus or an Event. Of a
// checkpoint in flight only ID, Final and Triggered are set; of a restored
// one ID, Final and Triggered (the time of its barrier).
type CheckpointInfo struct {
	ID        barrier.CheckpointID
	Final     bool
	Triggered time.Time
	Completed time.Time     // completed checkpoints
	Duration  time.Duration // completed: trigger to completion
	Size      int64         // completed: bytes of its files, the metadata (holding operator state) and the state files
	// Alignment, of a completed checkpoint, is the longest a subtask waited
	// between the first and the last barrier of its inputs (0 when no
	// subtask had to wait).
	Alignment time.Duration
	// Waiting, of a checkpoint in flight, names the subtasks whose
	// acknowledgement has not arrived yet ("chain (i/p)"), in plan order.
	Waiting []string
	Aborted time.Time // aborted checkpoints
	// Err is why an aborted checkpoint was aborted (an
	// *AlignmentTimeoutError names the slow inputs).
	Err error
}

// Failure is a failure of an attempt.
type Failure struct {
	Err  error
	Time time.Time
}

// TaskStatus is the progress of one subtask of a chain. Records are counted
// since Run began, over all attempts (like the job's metrics): RecordsIn by
// the chain's head (for a source: records read), RecordsOut sent by its tail
// to other subtasks.
//
// The subtask's running time, over all attempts, splits into BusyTime
// (processing), BackpressuredTime (waiting for room in a full downstream
// queue) and IdleTime (waiting for input, a timer or a checkpoint; for a
// source also the reads that returned no records). Each only grows; their
// rates over an interval are the shares of that interval.
type TaskStatus struct {
	Chain       string   // the chain's name
	Operators   []string // uids of the chained operators, head first
	Subtask     int
	Parallelism int
	Source      bool // the chain's head is a source
	State       TaskState
	RecordsIn   int64
	RecordsOut  int64

	BusyTime, BackpressuredTime, IdleTime time.Duration

	// Watermark is the subtask's event time: the last watermark its chain
	// advanced to (zero before the first; watermark.EndOfTime after its
	// inputs ended). WatermarkIdle: the subtask told its outputs it has no
	// data, so it holds no watermark back (docs/EVENT_TIME.md).
	Watermark     time.Time
	WatermarkIdle bool
}

// JobStatus is a consistent snapshot of a job (see Job.Status).
type JobStatus struct {
	Name  string
	State JobState
	Since time.Time // when State was entered
	// Attempt is the number of the current (or last) attempt, 0 first;
	// Restarts the restarts since Run began.
	Attempt, Restarts int
	LastFailure       *Failure        // the latest failed attempt's error
	Restored          *CheckpointInfo // the checkpoint the current attempt restored
	LastCompleted     *CheckpointInfo // the last checkpoint completed since Run began
	InFlight          *CheckpointInfo // the checkpoint triggered and not yet completed or aborted
	LastAborted       *CheckpointInfo // the last checkpoint aborted since Run began, with why
	// Completed and Aborted count the checkpoints completed and aborted
	// since Run began.
	Completed, Aborted int
	Tasks              []TaskStatus // per subtask, in plan order (empty before Run)
	// CutGates, for a job whose sources have cut gates (Context.CutGate),
	// tells how many of them are open: while not all are, no checkpoint
	// is triggered. Nil without gates.
	CutGates *CutGateStatus
}

// CutGateStatus counts the cut gates of a running attempt.
type CutGateStatus struct{ Open, Total int }

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventState: the job entered State (Err: the failure of failed and
	// restarting).
	EventState EventKind = iota + 1
	// EventCheckpointTriggered: Checkpoint was triggered.
	EventCheckpointTriggered
	// EventCheckpointCompleted: Checkpoint completed.
	EventCheckpointCompleted
	// EventCheckpointAborted: Checkpoint was aborted; Err says why. A
	// checkpoint whose trigger failed (its folder could not be created)
	// is aborted with no EventCheckpointTriggered before it.
	EventCheckpointAborted
)

func (k EventKind) String() string {
	switch k {
	case EventState:
		return "state"
	case EventCheckpointTriggered:
		return "triggered"
	case EventCheckpointCompleted:
		return "completed"
	case EventCheckpointAborted:
		return "aborted"
	}
	return "unknown"
}

// Event is what a Listener receives.
type Event struct {
	Kind       EventKind
	Time       time.Time
	Attempt    int
	State      JobState       // EventState
	Checkpoint CheckpointInfo // checkpoint events
	Err        error          // aborted: the cause; failed, restarting: the failure
}

// Listener receives a job's events, one call at a time, in order, from the
// goroutine of Run or of the checkpoint coordinator: it must return quickly
// (hand work to a goroutine of its own), as checkpoints wait for it. When
// it is called, Job.Status already reflects the event.
type Listener func(Event)

// taskStat is the progress of one subtask, written by its task goroutine
// with atomics only.
type taskStat struct {
	chain   *chain
	subtask int
	state   atomic.Uint32 // index in taskStates
	in, out atomic.Int64
	time    taskTime
	wm      atomic.Int64 // watermark.Min until the first watermark
	wmIdle  atomic.Bool
	wmGauge prometheus.Gauge // set by the first watermark
	wmVec   *prometheus.GaugeVec
}

// setWatermark records the subtask's watermark (status and metric).
func (s *taskStat) setWatermark(w int64) {
	s.wm.Store(w)
	if w == watermark.Min || s.wmVec == nil {
		return
	}
	if s.wmGauge == nil {
		s.wmGauge = s.wmVec.WithLabelValues(s.chain.nodes[0].uid, strconv.Itoa(s.subtask))
	}
	s.wmGauge.Set(float64(w) / 1e9)
}

func (s *taskStat) setState(st TaskState) {
	for i, v := range taskStates {
		if v == st {
			s.state.Store(uint32(i))
			return
		}
	}
}

// countOut adds to the subtask's records out, then calls next (the metric).
func (s *taskStat) countOut(next func(int)) func(int) {
	return func(n int) {
		s.out.Add(int64(n))
		next(n)
	}
}

// statusBoard holds a job's status. Changes are rare (state changes,
// checkpoints) and take mu; the per-record progress is in taskStats.
type statusBoard struct {
	emitMu   sync.Mutex // serializes changes with their listener calls
	listener Listener

	mu    sync.Mutex
	st    JobStatus // Tasks unset
	tasks []*taskStat
	byCh  map[*chain][]*taskStat
	cuts  *cutGates // of the current attempt
}

// setCuts makes the status count the gates of an attempt.
func (b *statusBoard) setCuts(c *cutGates) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cuts = c
}

func newStatusBoard(name string, l Listener) *statusBoard {
	return &statusBoard{listener: l, st: JobStatus{Name: name, State: StateCreated, Since: time.Now()}}
}

// setTasks makes the progress counters of the plan's subtasks.
func (b *statusBoard) setTasks(p *plan) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.byCh = map[*chain][]*taskStat{}
	for _, c := range p.chains {
		for sub := 0; sub < c.parallelism; sub++ {
			s := &taskStat{chain: c, subtask: sub}
			s.wm.Store(watermark.Min)
			b.tasks = append(b.tasks, s)
			b.byCh[c] = append(b.byCh[c], s)
		}
	}
}

// taskStats returns the progress counters of every subtask, in plan order.
func (b *statusBoard) taskStats() []*taskStat {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tasks
}

func (b *statusBoard) stat(c *chain, sub int) *taskStat {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byCh[c][sub]
}

// change applies f to the status and tells the listener of ev (stamped with
// the time and attempt), unless ev.Kind is 0.
func (b *statusBoard) change(ev Event, f func(*JobStatus)) {
	b.emitMu.Lock()
	defer b.emitMu.Unlock()
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	b.mu.Lock()
	f(&b.st)
	ev.Attempt = b.st.Attempt
	b.mu.Unlock()
	if b.listener != nil && ev.Kind != 0 {
		b.listener(ev)
	}
}

// setState enters state s (err: the failure of failed and restarting),
// applying f too if not nil.
func (b *statusBoard) setState(s JobState, err error, f func(*JobStatus)) {
	b.change(Event{Kind: EventState, State: s, Err: err}, func(st *JobStatus) {
		st.State, st.Since = s, time.Now()
		if f != nil {
			f(st)
		}
	})
}

func (b *statusBoard) status() JobStatus {
	b.mu.Lock()
	st := b.st
	tasks := b.tasks
	cuts := b.cuts
	b.mu.Unlock()
	if cuts != nil {
		if open, total := cuts.count(); total > 0 {
			st.CutGates = &CutGateStatus{Open: open, Total: total}
		}
	}
	for _, p := range []**CheckpointInfo{&st.Restored, &st.LastCompleted, &st.InFlight, &st.LastAborted} {
		if *p != nil {
			c := **p
			*p = &c
		}
	}
	if st.LastFailure != nil {
		f := *st.LastFailure
		st.LastFailure = &f
	}
	st.Tasks = make([]TaskStatus, len(tasks))
	for i, s := range tasks {
		uids := make([]string, len(s.chain.nodes))
		for k, n := range s.chain.nodes {
			uids[k] = n.uid
		}
		busy, bp, idle := s.time.totals()
		st.Tasks[i] = TaskStatus{Chain: s.chain.name, Operators: uids, Subtask: s.subtask, Parallelism: s.chain.parallelism,
			Source: s.chain.nodes[0].source, State: taskStates[s.state.Load()], RecordsIn: s.in.Load(), RecordsOut: s.out.Load(),
			BusyTime: busy, BackpressuredTime: bp, IdleTime: idle,
			Watermark: watermark.ToTime(s.wm.Load()), WatermarkIdle: s.wmIdle.Load()}
	}
	return st
}

// Status returns a consistent snapshot of the job: its state, attempts,
// last failure, checkpoints and per-subtask progress. It is cheap and safe
// to call from any goroutine, before, during and after Run.
func (j *Job) Status() JobStatus { return j.board.status() }

// triggered records checkpoint b in flight, waiting for the acks of tasks.
func (b *statusBoard) triggered(br barrier.Barrier, tasks []string) {
	info := CheckpointInfo{ID: br.ID, Final: br.Final, Triggered: br.Time, Waiting: tasks}
	b.change(Event{Kind: EventCheckpointTriggered, Checkpoint: info}, func(st *JobStatus) { st.InFlight = &info })
}

// acked records that task acknowledged checkpoint id (no event: the
// listener hears of the checkpoint's end). Waiting is replaced, never
// changed in place: a status handed out shares it.
func (b *statusBoard) acked(id barrier.CheckpointID, task string) {
	b.change(Event{}, func(st *JobStatus) {
		if c := st.InFlight; c != nil && c.ID == id {
			in := *c
			in.Waiting = slices.DeleteFunc(slices.Clone(c.Waiting), func(w string) bool { return w == task })
			st.InFlight = &in
		}
	})
}

// completed records checkpoint br completed after d, with size bytes, its
// longest alignment having taken aligned.
func (b *statusBoard) completed(br barrier.Barrier, d time.Duration, size int64, aligned time.Duration) {
	info := CheckpointInfo{ID: br.ID, Final: br.Final, Triggered: br.Time, Completed: br.Time.Add(d), Duration: d, Size: size,
		Alignment: aligned}
	b.change(Event{Kind: EventCheckpointCompleted, Checkpoint: info}, func(st *JobStatus) {
		st.LastCompleted, st.InFlight = &info, nil
		st.Completed++
	})
}

// aborted records checkpoint br aborted for cause.
func (b *statusBoard) aborted(br barrier.Barrier, cause error) {
	info := CheckpointInfo{ID: br.ID, Final: br.Final, Triggered: br.Time, Aborted: time.Now(), Err: cause}
	b.change(Event{Kind: EventCheckpointAborted, Time: info.Aborted, Checkpoint: info, Err: cause}, func(st *JobStatus) {
		if st.InFlight != nil && st.InFlight.ID == br.ID {
			st.InFlight = nil
		}
		st.LastAborted = &info
		st.Aborted++
	})
}
