package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
)

// discard consumes the output of an operator nobody reads.
type discard[T any] struct{}

func (discard[T]) push([]T) error { return nil }

// buildTasks instantiates every subtask of every chain, wiring exchanges to
// the downstream gates.
func (a *attempt) buildTasks(ctx context.Context) ([]*task, error) {
	opts := a.job.opts
	gates := map[*chain][]*gate{}
	for _, c := range a.plan.chains {
		if n := c.gateInputs(); n > 0 {
			gs := make([]*gate, c.parallelism)
			for i := range gs {
				gs[i] = newGate(n, opts.ChannelCapacity)
			}
			gates[c] = gs
		}
	}
	var tasks []*task
	for _, c := range a.plan.chains {
		for sub := 0; sub < c.parallelism; sub++ {
			t := &task{att: a, chain: c, subtask: sub, mailbox: newMailbox(),
				timers: &timerSet{at: make([]time.Time, len(c.nodes))}}
			t.log = a.log.With("task", t.name())
			t.stat = a.job.board.stat(c, sub)
			t.stat.wmVec = a.job.metrics.watermarks
			t.stat.setState(TaskCreated)
			tail := c.nodes[len(c.nodes)-1]
			var out any
			if len(c.outputs) > 0 {
				outs := make([]any, len(c.outputs))
				for k, e := range c.outputs {
					down := a.plan.chainOf[e.to]
					targets := make([]target, down.parallelism)
					off := inputOffset(down, e)
					for d := range targets {
						targets[d] = target{gate: gates[down][d], input: off + sub}
					}
					x := e.newWriter(&exchangeSpec{ctx: ctx, subtask: sub, targets: targets,
						batchSize: opts.BatchSize, records: t.stat.countOut(a.job.metrics.recordsOut(tail.uid)), time: &t.stat.time}, e.kind)
					t.outs = append(t.outs, x)
					outs[k] = x
				}
				out = tail.fanout(outs)
			} else if tail.discard != nil {
				out = tail.discard()
			}
			t.links = make([]link, len(c.nodes))
			t.ctxs = make([]*Context, len(c.nodes))
			for k := len(c.nodes) - 1; k >= 0; k-- {
				l, in := c.nodes[k].instantiate(out)
				t.links[k], out = l, in
			}
			t.wm = wmState{out: watermark.Min}
			if c.nodes[0].source {
				t.src = t.links[0].(reader)
				t.wmSrc = t.src.watermarks(func() error { return t.setIdle(false) })
			} else {
				t.gate = gates[c][sub]
				t.aligner = barrier.NewAligner(c.gateInputs(), opts.Checkpoint.Mode)
				t.valve = watermark.NewValve(c.gateInputs(), watermark.Min)
				t.input = out
			}
			tasks = append(tasks, t)
		}
	}
	return tasks, nil
}

// openTasks opens every link with its restored state. It returns the tasks
// opened so far, which the caller closes.
func (a *attempt) openTasks(tasks []*task) ([]*task, error) {
	opts := a.job.opts
	for i, t := range tasks {
		envs := make([]*openEnv, len(t.chain.nodes))
		floor, restored := watermark.Max, false
		for k, n := range t.chain.nodes {
			ctx := &Context{ctx: a.ctx, Job: opts.Name, Operator: n.uid, Subtask: t.subtask, Parallelism: n.parallelism,
				MaxParallelism: opts.MaxParallelism, Attempt: a.number, timers: t.timers, link: k,
				RetainedCheckpoints: opts.Checkpoint.Retain,
				Dir:                 filepath.Join(a.jobDir, "operators", n.uid, strconv.Itoa(t.subtask)),
				Logger:              t.log.With("operator", n.uid),
				Registerer:          t.registerer(n.uid)}
			if n.source {
				ctx.cuts = a.coord.cuts
			}
			env := &openEnv{ctx: ctx, backends: opts.StateBackend}
			if n.keyed {
				env.keyed = state.KeyedSpec{
					Dir:       filepath.Join(a.jobDir, "state", n.uid, strconv.Itoa(t.subtask)),
					KeyGroups: state.RangeFor(opts.MaxParallelism, n.parallelism, t.subtask),
				}
			}
			if a.restored != nil {
				if err := a.restoreInto(env, n); err != nil {
					return tasks[:i], err
				}
				w, ok, err := takeWatermarks(&ctx.State)
				if err != nil {
					return tasks[:i], fmt.Errorf("%w: restore %q subtask %d: %w", ErrRestore, n.uid, t.subtask, err)
				}
				if ok {
					floor, restored = min(floor, w), true
				}
			}
			t.ctxs[k], envs[k] = ctx, env
		}
		if restored {
			t.setFloor(floor)
		}
		for k, n := range t.chain.nodes {
			t.ctxs[k].wm = t.wm.out
			if err := t.links[k].open(envs[k]); err != nil {
				t.links = t.links[:k] // close only what opened
				return tasks[:i+1], fmt.Errorf("open %q subtask %d: %w", n.uid, t.subtask, err)
			}
		}
	}
	return tasks, nil
}

// restoreInto fills env with the state node n's subtask gets back.
func (a *attempt) restoreInto(env *openEnv, n *node) error {
	md := a.restored
	if md.MaxParallelism != a.job.opts.MaxParallelism {
		return fmt.Errorf("%w: checkpoint %d has max parallelism %d, the job %d (key groups cannot change)",
			ErrRestore, md.ID, md.MaxParallelism, a.job.opts.MaxParallelism)
	}
	op, ok := md.Operators[n.uid]
	if !ok {
		return nil // an operator added since the checkpoint starts empty
	}
	env.ctx.Restored, env.ctx.RestoredOK = md.ID, true
	opState, keyed := state.Redistribute(op, md.MaxParallelism, env.ctx.Parallelism, env.ctx.Subtask)
	env.ctx.State = opState
	if n.keyed {
		dir := a.storage.Path(md.ID)
		for _, s := range keyed {
			env.keyed.Restore = append(env.keyed.Restore, state.Restored{CheckpointDir: dir, Snapshot: s})
		}
	}
	return nil
}

// checkRestorable rejects a checkpoint holding state for operators the job no
// longer has: dropping state silently could break exactly-once.
func (a *attempt) checkRestorable() error {
	if a.restored == nil {
		return nil
	}
	var errs []error
	for uid := range a.restored.Operators {
		if _, ok := a.job.uids[uid]; !ok {
			errs = append(errs, fmt.Errorf("%w: checkpoint %d holds state of operator %q, which the job no longer has",
				ErrRestore, a.restored.ID, uid))
		}
	}
	return errors.Join(errs...)
}

func (a *attempt) closeTasks(tasks []*task) {
	for _, t := range tasks {
		for k, l := range t.links {
			if err := l.close(); err != nil {
				a.log.Warn("close operator", "operator", t.chain.nodes[k].uid, "subtask", t.subtask, "err", err)
			}
		}
	}
}
