package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
)

// ErrRestore marks a failure to restore a checkpoint (missing, corrupt or
// incompatible state): restarting will not help.
var ErrRestore = errors.New("runtime: restore failed")

// ErrPermanent marks a failure that a restart cannot mend (a record the job
// is told to fail on, a configuration the sink refuses): the job ends at once
// instead of restarting. Wrap errors with Permanent.
var ErrPermanent = errors.New("runtime: permanent failure")

// Permanent marks err as not worth a restart.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// Run runs the job until its bounded sources end, Stop is called, or ctx is
// cancelled, restarting in-process from the latest completed checkpoint after
// a failure. It returns only when every goroutine it started has ended.
// Cancelling ctx returns ctx's error; the state stays at the last checkpoint.
//
// Status follows the run and Options.Listener hears of it: the job ends
// finished (nil), canceled (ctx's error) or failed (any other error).
func (j *Job) Run(ctx context.Context) error {
	if j.built {
		return errors.New("runtime: job already ran")
	}
	j.built = true
	err := j.run(ctx)
	switch {
	case err == nil:
		j.board.setState(StateFinished, nil, nil)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		j.board.setState(StateCanceled, nil, nil)
	default:
		j.board.setState(StateFailed, err, func(st *JobStatus) { st.LastFailure = &Failure{Err: err, Time: time.Now()} })
	}
	return err
}

func (j *Job) run(ctx context.Context) error {
	if err := j.opts.validate(); err != nil {
		return fmt.Errorf("job %q: %w", j.opts.Name, err)
	}
	if err := errors.Join(j.errs...); err != nil {
		return fmt.Errorf("job %q: %w", j.opts.Name, err)
	}
	p, err := buildPlan(j.nodes)
	if err != nil {
		return fmt.Errorf("job %q: %w", j.opts.Name, err)
	}
	uids := make([]string, len(j.nodes))
	for i, n := range j.nodes {
		uids[i] = n.uid
	}
	j.board.setTasks(p)
	j.metrics = newMetrics(j.opts.Registerer, j.opts.Name, uids, j.board.taskStats())
	log := j.opts.Logger.With("job", j.opts.Name)

	dataDir := j.opts.DataDir
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "ebbflow-")
		if err != nil {
			return fmt.Errorf("job %q: make data dir: %w", j.opts.Name, err)
		}
		defer os.RemoveAll(tmp)
		dataDir = tmp
	}
	jobDir := filepath.Join(dataDir, "jobs", j.opts.Name)
	storage, err := state.OpenStorage(filepath.Join(jobDir, "checkpoints"))
	if err != nil {
		return fmt.Errorf("job %q: open checkpoints: %w", j.opts.Name, err)
	}

	md, ok, err := j.restorePoint(storage, log, j.opts.Restore)
	if err != nil {
		return fmt.Errorf("job %q: %w", j.opts.Name, err)
	}
	backoff := j.opts.Restart.InitialBackoff
	failures := 0
	for attemptNo := 0; ; attemptNo++ {
		att := &attempt{job: j, plan: p, storage: storage, jobDir: jobDir, number: attemptNo, log: log.With("attempt", attemptNo)}
		var restored *CheckpointInfo
		if ok {
			att.restored = &md
			restored = &CheckpointInfo{ID: md.ID, Final: md.Final, Triggered: md.Time}
		}
		j.board.setState(StateInitializing, nil, func(st *JobStatus) { st.Attempt, st.Restored = attemptNo, restored })
		err := att.run(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrRestore) || errors.Is(err, ErrPermanent) {
			return fmt.Errorf("job %q: %w", j.opts.Name, err)
		}
		if att.stopping.Load() {
			// A stop whose final checkpoint failed: the next attempt restores
			// the latest checkpoint and stops with a final one again.
			signal(j.stopReq)
		}
		if att.progressed.Load() {
			failures, backoff = 0, j.opts.Restart.InitialBackoff
		}
		failures++
		if j.opts.Restart.MaxAttempts < 0 || failures > j.opts.Restart.MaxAttempts {
			return fmt.Errorf("job %q failed after %d restarts: %w", j.opts.Name, failures-1, err)
		}
		log.Warn("job failed; restarting from the latest checkpoint", "err", err, "backoff", backoff, "restart", failures)
		j.board.setState(StateRestarting, err, func(st *JobStatus) {
			st.Restarts++
			st.LastFailure = &Failure{Err: err, Time: time.Now()}
		})
		j.metrics.restarts.Inc()
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, j.opts.Restart.MaxBackoff)
		if md, ok, err = j.restorePoint(storage, log, RestoreLatest); err != nil {
			return fmt.Errorf("job %q: %w", j.opts.Name, err)
		}
	}
}

// restorePoint finds the checkpoint to restore.
func (j *Job) restorePoint(storage *state.Storage, log *slog.Logger, rp RestorePoint) (state.Metadata, bool, error) {
	switch rp.kind {
	case RestoreNone.kind:
		return state.Metadata{}, false, nil
	case 2:
		md, err := storage.Load(rp.id)
		if err != nil {
			return md, false, fmt.Errorf("%w: checkpoint %d: %w", ErrRestore, rp.id, err)
		}
		return md, true, nil
	}
	md, skipped, err := storage.Latest()
	for _, s := range skipped {
		log.Warn("checkpoint skipped", "reason", s)
	}
	if errors.Is(err, state.ErrNoCheckpoint) {
		// Only incomplete folders (a crash before the first checkpoint
		// completed) allow a fresh start; completed but unreadable ones do not.
		for _, s := range skipped {
			if !errors.Is(s, state.ErrIncomplete) {
				return md, false, fmt.Errorf("%w: no checkpoint verifies: %w", ErrRestore, errors.Join(skipped...))
			}
		}
		return md, false, nil
	}
	if err != nil {
		return md, false, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	return md, true, nil
}

// attempt is one run of the job's tasks, from (re)start to the end or the
// first failure. It owns every goroutine it starts.
type attempt struct {
	job      *Job
	plan     *plan
	storage  *state.Storage
	jobDir   string
	number   int
	log      *slog.Logger
	restored *state.Metadata

	ctx       context.Context
	cancel    context.CancelCauseFunc
	wg        sync.WaitGroup
	coord     *coordinator
	waitFirst bool // sources wait for the initial checkpoint to complete
	firstID   barrier.CheckpointID

	stopping   atomic.Bool
	progressed atomic.Bool // a checkpoint completed in this attempt

	// failure is the first error given to fail, kept apart from the
	// context's cause: a cause wrapping context.Canceled would otherwise
	// read as a plain cancellation, and the failed attempt as a success.
	failMu  sync.Mutex
	failure error
}

func (a *attempt) goAsync(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
}

// fail ends the attempt with err (the first failure wins).
func (a *attempt) fail(err error) {
	a.failMu.Lock()
	if a.failure == nil {
		a.failure = err
	}
	a.failMu.Unlock()
	a.cancel(err)
}

// failed returns the attempt's first failure, if any.
func (a *attempt) failed() error {
	a.failMu.Lock()
	defer a.failMu.Unlock()
	return a.failure
}

func (a *attempt) checkpointCompleted(barrier.CheckpointID) { a.progressed.Store(true) }

func (a *attempt) run(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	a.ctx, a.cancel = ctx, cancel

	next := barrier.CheckpointID(0)
	if a.restored != nil {
		next = a.restored.ID + 1
		a.job.metrics.restores.Inc()
		a.log.Info("restoring", "checkpoint", a.restored.ID)
		// Newer checkpoints (an older one was chosen) are of a timeline the
		// restore abandons: a later restore of the latest must not find them.
		moved, err := a.storage.Abandon(a.restored.ID)
		if len(moved) > 0 {
			a.log.Warn("newer checkpoints abandoned", "checkpoints", moved, "restored", a.restored.ID)
		}
		if err != nil {
			return err
		}
	} else {
		// A fresh start continues after any id already on disk, so
		// checkpoints of an earlier run are superseded, never overwritten.
		cps, err := a.storage.List()
		if err != nil {
			return err
		}
		if len(cps) > 0 {
			next = cps[len(cps)-1].ID + 1
		}
		a.waitFirst, a.firstID = true, next
	}
	if err := a.checkRestorable(); err != nil {
		return err
	}
	a.coord = newCoordinator(a, a.storage)
	tasks, err := a.buildTasks(ctx)
	if err != nil {
		return err
	}
	a.coord.setTasks(tasks, next, a.waitFirst)
	opened, err := a.openTasks(tasks)
	defer a.closeTasks(opened)
	if err != nil {
		return err
	}
	a.job.board.setCuts(a.coord.cuts)

	if a.waitFirst {
		// The initial checkpoint is triggered (start, below) before any
		// task runs and the sources hold until it completed: no record may be read, let alone
		// written to a sink, before every sink has its baseline. (A source
		// reading first would put records before barrier 0 that a crash
		// before its completion leaves in the sinks with nothing to undo.)
		for _, t := range a.coord.sources {
			id := a.firstID
			t.waitComplete = &id
		}
	}
	a.job.board.setState(StateRunning, nil, nil)
	a.coord.start()
	coordCtx, stopCoord := context.WithCancel(ctx)
	var coordDone sync.WaitGroup
	coordDone.Add(1)
	go func() {
		defer coordDone.Done()
		a.coord.run(coordCtx)
	}()

	var tasksDone sync.WaitGroup
	for _, t := range tasks {
		tasksDone.Add(1)
		go func() {
			defer tasksDone.Done()
			t.stat.setState(TaskRunning)
			t.stat.time.enter(working)
			err := t.run(ctx)
			t.stat.time.enter(notRunning)
			switch {
			case ctx.Err() != nil:
				t.stat.setState(TaskCanceled)
			case err != nil:
				t.stat.setState(TaskFailed)
				a.fail(fmt.Errorf("task %s: %w", t.name(), err))
			default:
				t.stat.setState(TaskFinished)
			}
		}()
	}
	tasksDone.Wait()
	stopCoord()
	coordDone.Wait()
	cancel(nil)
	a.wg.Wait()
	if err := a.failed(); err != nil {
		return err
	}
	return parent.Err()
}
