package runtime

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
)

// AlignmentTimeoutError is why a checkpoint was aborted when a subtask had
// waited longer than CheckpointOptions.AlignmentTimeout for the barriers of
// some of its inputs: the Err of its EventCheckpointAborted and of
// JobStatus.LastAborted (find it with errors.As).
type AlignmentTimeoutError struct {
	Task       string // the aligning subtask, "chain (i/n)"
	Checkpoint barrier.CheckpointID
	Waited     time.Duration // since its first barrier blocked an input
	// Late names the upstream subtasks whose barrier had not arrived, the
	// slow inputs, as "chain (i/n)".
	Late []string
}

func (e *AlignmentTimeoutError) Error() string {
	return fmt.Sprintf("task %s: checkpoint %d: alignment timed out after %s waiting for the barrier of %s",
		e.Task, e.Checkpoint, e.Waited.Round(time.Millisecond), strings.Join(e.Late, ", "))
}

// checkAlignmentTimeout aborts the pending alignment when it has waited
// for its last barriers longer than the alignment timeout. It reads the
// clock only while an alignment blocks an input.
func (t *task) checkAlignmentTimeout(ctx context.Context) error {
	at, ok := t.alignmentDeadline()
	if !ok || time.Now().Before(at) {
		return nil
	}
	id, _ := t.aligner.Pending()
	return t.perform(ctx, t.aligner.OnAlignmentTimeout(id))
}

// abortCause says why the aligner aborted (action a): after an alignment
// timeout, with the names of the late inputs and the time waited.
func (t *task) abortCause(a barrier.Action) (abortCause, error) {
	if a.Reason != barrier.AlignmentTimedOut {
		return causeDeclined, fmt.Errorf("task %s: checkpoint %d aborted during alignment: %v", t.name(), a.ID, a.Reason)
	}
	late := make([]string, len(a.Late))
	for k, i := range a.Late {
		late[k] = t.inputName(i)
	}
	return causeAlignmentTimeout, &AlignmentTimeoutError{Task: t.name(), Checkpoint: a.ID, Waited: time.Since(t.alignAt), Late: late}
}

// alignmentDeadline returns when the pending alignment times out, if it can.
func (t *task) alignmentDeadline() (time.Time, bool) {
	d := t.att.job.opts.Checkpoint.AlignmentTimeout
	if d <= 0 || t.alignAt.IsZero() || !t.aligner.CanTimeOut() {
		return time.Time{}, false
	}
	return t.alignAt.Add(d), true
}

// inputName names the upstream subtask that writes gate input i: its chain
// and subtask, as in task names.
func (t *task) inputName(i int) string {
	for _, e := range t.chain.inputs {
		if p := e.from.parallelism; i >= p {
			i -= p
			continue
		}
		up := t.att.plan.chainOf[e.from]
		return fmt.Sprintf("%s (%d/%d)", up.name, i+1, up.parallelism)
	}
	panic(fmt.Sprintf("runtime: task %s has no input %d", t.name(), i))
}
