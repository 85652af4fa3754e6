package barrier

import "fmt"

// ActionKind says what the task must do.
type ActionKind uint8

const (
	// Block: stop reading input Action.Input until a Resume.
	Block ActionKind = iota + 1
	// Resume: read every blocked input again.
	Resume
	// Snapshot: every input delivered Action.Barrier; snapshot the operators,
	// then forward the barrier downstream.
	Snapshot
	// Abort: checkpoint Action.ID will not complete here (Action.Reason
	// says why); decline it and forward a Cancel downstream.
	Abort
	// EndOfInput: every input ended; forward end-of-input downstream.
	EndOfInput
)

func (k ActionKind) String() string {
	switch k {
	case Block:
		return "block"
	case Resume:
		return "resume"
	case Snapshot:
		return "snapshot"
	case Abort:
		return "abort"
	case EndOfInput:
		return "end-of-input"
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// AbortReason says why an alignment was aborted.
type AbortReason uint8

const (
	// Subsumed: a barrier of a newer checkpoint arrived.
	Subsumed AbortReason = iota + 1
	// Canceled: an upstream subtask aborted the checkpoint (a Cancel).
	Canceled
	// AlignmentTimedOut: the task's alignment timeout passed before every
	// input delivered the barrier (OnAlignmentTimeout).
	AlignmentTimedOut
	// CoordinatorAborted: the coordinator aborted the checkpoint (for
	// another subtask's reason, or its timeout) while this one aligned it
	// (OnAborted); it knows, so the task need not decline it.
	CoordinatorAborted
)

func (r AbortReason) String() string {
	switch r {
	case Subsumed:
		return "subsumed"
	case Canceled:
		return "canceled"
	case AlignmentTimedOut:
		return "alignment timed out"
	case CoordinatorAborted:
		return "aborted by the coordinator"
	}
	return fmt.Sprintf("AbortReason(%d)", uint8(r))
}

// Action is one step the task performs, in the order returned.
type Action struct {
	Kind    ActionKind
	Input   int          // Block
	Barrier Barrier      // Snapshot
	ID      CheckpointID // Abort
	Reason  AbortReason  // Abort
	// Late lists, for an Abort after an alignment timeout, the inputs whose
	// barrier had not arrived (the slow ones), in order.
	Late []int
}

func (a Action) String() string {
	switch a.Kind {
	case Block:
		return fmt.Sprintf("block %d", a.Input)
	case Snapshot:
		return fmt.Sprintf("snapshot %d", a.Barrier.ID)
	case Abort:
		s := fmt.Sprintf("abort %d (%v)", a.ID, a.Reason)
		if len(a.Late) > 0 {
			s += fmt.Sprintf(", late inputs %v", a.Late)
		}
		return s
	}
	return a.Kind.String()
}

type inputState uint8

const (
	open    inputState = iota // no barrier yet for the pending checkpoint
	arrived                   // delivered the pending barrier
	ended                     // end of input: aligned for every checkpoint
)

// Aligner is the barrier alignment state machine of one subtask. It is not
// safe for concurrent use: the task goroutine owns it. It reads no clock:
// the task owns the alignment timer and reports its expiry with
// OnAlignmentTimeout.
type Aligner struct {
	mode    Mode
	inputs  []inputState
	ended   int
	started bool         // some checkpoint id was seen
	current CheckpointID // newest id seen (pending, completed or aborted)
	pending bool         // an alignment for current is under way
	barrier Barrier      // the pending barrier
	arrived int          // inputs in state arrived
	blocked bool         // some input is blocked (exactly-once only)
}

// NewAligner returns an aligner for a subtask with n inputs (n ≥ 1).
func NewAligner(n int, mode Mode) *Aligner {
	if n < 1 {
		panic(fmt.Sprintf("barrier: aligner needs at least one input, got %d", n))
	}
	return &Aligner{mode: mode, inputs: make([]inputState, n)}
}

// Inputs returns the number of inputs.
func (a *Aligner) Inputs() int { return len(a.inputs) }

// Pending returns the checkpoint being aligned, if any.
func (a *Aligner) Pending() (CheckpointID, bool) { return a.current, a.pending }

// Blocked reports whether input i must not be read now.
func (a *Aligner) Blocked(i int) bool {
	return a.mode == ExactlyOnce && a.pending && a.inputs[i] == arrived
}

// Ended reports whether input i delivered end-of-input.
func (a *Aligner) Ended(i int) bool { return a.inputs[i] == ended }

// isOld reports whether id was already decided (completed or aborted) or is
// older than the pending one.
func (a *Aligner) isOld(id CheckpointID) bool {
	if !a.started {
		return false
	}
	return id < a.current || (id == a.current && !a.pending)
}

// OnBarrier handles barrier b arriving on input i.
func (a *Aligner) OnBarrier(i int, b Barrier) []Action {
	a.checkInput(i)
	if a.inputs[i] == ended {
		panic(fmt.Sprintf("barrier: %v on input %d after its end", b, i))
	}
	if a.isOld(b.ID) {
		return nil
	}
	var acts []Action
	if a.pending && b.ID > a.current {
		acts = a.abortPending(acts, Subsumed, nil)
	}
	if !a.pending {
		a.start(b)
	}
	if a.inputs[i] == arrived {
		panic(fmt.Sprintf("barrier: %v twice on input %d", b, i))
	}
	a.inputs[i] = arrived
	a.arrived++
	if a.aligned() {
		return a.complete(acts)
	}
	if a.mode == ExactlyOnce {
		a.blocked = true
		acts = append(acts, Action{Kind: Block, Input: i})
	}
	return acts
}

// OnCancel handles a cancel for checkpoint id arriving on input i.
func (a *Aligner) OnCancel(i int, id CheckpointID) []Action {
	a.checkInput(i)
	if a.isOld(id) {
		return nil
	}
	var acts []Action
	if a.pending {
		reason := Subsumed
		if id == a.barrier.ID {
			reason = Canceled
		}
		acts = a.abortPending(acts, reason, nil)
		if id == a.barrier.ID {
			return acts
		}
	}
	// A cancel for a checkpoint this subtask has not seen yet: abort it now
	// so its barriers are ignored when they come.
	a.started, a.current = true, id
	return append(acts, Action{Kind: Abort, ID: id, Reason: Canceled})
}

// OnAborted handles the coordinator's notice that checkpoint id, and every
// earlier one, was aborted: an alignment pending for one of them ends (its
// blocked inputs are read again instead of waiting for barriers that may
// come late or never), and their barriers are ignored when they come.
func (a *Aligner) OnAborted(id CheckpointID) []Action {
	if a.started && id < a.current {
		return nil
	}
	var acts []Action
	if a.pending {
		acts = a.abortPending(acts, CoordinatorAborted, nil)
	}
	a.started, a.current = true, id
	return acts
}

// CanTimeOut reports whether the pending alignment is one that an
// alignment timeout aborts: it blocks an input (exactly-once), and its
// checkpoint is neither the initial one (taken before any record: nothing
// is in flight, a late barrier only means a subtask slow to start, and its
// abort would fail the attempt) nor a final one (of a stop or a bounded
// job's end, whose abort would fail the attempt too): those wait up to the
// checkpoint timeout. The task arms its timer only when it is true.
func (a *Aligner) CanTimeOut() bool {
	return a.pending && a.blocked && !a.barrier.Initial && !a.barrier.Final
}

// OnAlignmentTimeout handles the expiry of the alignment timer that the
// task started when checkpoint id's first barrier blocked an input: if id is
// still being aligned (and CanTimeOut) it is aborted, naming the inputs
// whose barrier has not arrived; a timer of an id already decided is
// ignored. Its barriers that
// come later are ignored, as after a cancel.
func (a *Aligner) OnAlignmentTimeout(id CheckpointID) []Action {
	if !a.CanTimeOut() || id != a.current {
		return nil
	}
	var late []int
	for i, s := range a.inputs {
		if s == open {
			late = append(late, i)
		}
	}
	return a.abortPending(nil, AlignmentTimedOut, late)
}

// OnEndOfInput handles the end of input i.
func (a *Aligner) OnEndOfInput(i int) []Action {
	a.checkInput(i)
	if a.inputs[i] == ended {
		return nil
	}
	if a.inputs[i] == arrived {
		a.arrived--
	}
	a.inputs[i] = ended
	a.ended++
	var acts []Action
	if a.pending && a.aligned() {
		acts = a.complete(acts)
	}
	if a.ended == len(a.inputs) {
		acts = append(acts, Action{Kind: EndOfInput})
	}
	return acts
}

func (a *Aligner) start(b Barrier) {
	a.started, a.current, a.pending, a.barrier = true, b.ID, true, b
	a.arrived = 0
}

func (a *Aligner) aligned() bool { return a.arrived+a.ended == len(a.inputs) }

func (a *Aligner) complete(acts []Action) []Action {
	acts = append(acts, Action{Kind: Snapshot, Barrier: a.barrier})
	return a.reset(acts)
}

func (a *Aligner) abortPending(acts []Action, reason AbortReason, late []int) []Action {
	acts = append(acts, Action{Kind: Abort, ID: a.barrier.ID, Reason: reason, Late: late})
	return a.reset(acts)
}

// reset ends the pending alignment and resumes blocked inputs.
func (a *Aligner) reset(acts []Action) []Action {
	a.pending = false
	a.arrived = 0
	for j, s := range a.inputs {
		if s == arrived {
			a.inputs[j] = open
		}
	}
	if a.blocked {
		a.blocked = false
		acts = append(acts, Action{Kind: Resume})
	}
	return acts
}

func (a *Aligner) checkInput(i int) {
	if i < 0 || i >= len(a.inputs) {
		panic(fmt.Sprintf("barrier: input %d out of range [0,%d)", i, len(a.inputs)))
	}
}
