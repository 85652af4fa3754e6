package barrier

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "run TestAlignerRandom for this seed only (0: random seeds)")

// TestAlignerRandom feeds the aligner random interleavings of per-input
// streams and checks every action against a model of the task that owns it.
// A failure prints the seed and the trace; -seed reruns that case alone.
func TestAlignerRandom(t *testing.T) {
	seeds := []uint64{*seedFlag}
	if *seedFlag == 0 {
		base := uint64(time.Now().UnixNano())
		seeds = make([]uint64, 2000)
		for i := range seeds {
			seeds[i] = base + uint64(i)
		}
	}
	for _, seed := range seeds {
		if s, err := simulate(seed); err != nil {
			t.Fatalf("seed %d: %v\nrerun: go test ./barrier -run TestAlignerRandom -seed %d\n%s", seed, err, seed, s)
		}
	}
}

type eventKind uint8

const (
	record eventKind = iota
	barrierEvent
	cancelEvent
	endEvent
)

type event struct {
	kind eventKind
	id   CheckpointID
}

func (e event) String() string {
	switch e.kind {
	case record:
		return "record"
	case barrierEvent:
		return fmt.Sprintf("barrier %d", e.id)
	case cancelEvent:
		return fmt.Sprintf("cancel %d", e.id)
	}
	return "end"
}

// genStreams returns one stream per input: records, then for each id in
// order its barrier, or (sometimes) a cancel or nothing; some streams end,
// possibly early, the others stay open with nothing more to read.
func genStreams(r *rand.Rand, n int) [][]event {
	maxID := 1 + r.IntN(8)
	pSkip, pCancel := 0.0, 0.0
	if r.IntN(3) > 0 {
		pSkip, pCancel = r.Float64()*0.2, r.Float64()*0.1
	}
	streams := make([][]event, n)
	for i := range streams {
		var s []event
		for id := range CheckpointID(maxID + 1) {
			for range r.IntN(3) {
				s = append(s, event{kind: record})
			}
			switch p := r.Float64(); {
			case p < pSkip:
			case p < pSkip+pCancel:
				s = append(s, event{kind: cancelEvent, id: id})
			default:
				s = append(s, event{kind: barrierEvent, id: id})
			}
		}
		if r.IntN(3) == 0 {
			s = append(s[:r.IntN(len(s)+1)], event{kind: endEvent})
		}
		streams[i] = s
	}
	return streams
}

// model is the task that owns the aligner: it reads only unblocked inputs and
// checks each action it is given.
type model struct {
	mode    Mode
	a       *Aligner
	streams [][]event
	next    []int  // index of the next event to read, per input
	blocked []bool // as told by Block and Resume
	ended   []bool
	// delivered[i] holds the barrier ids read on input i.
	delivered []map[CheckpointID]bool
	decided   []Action              // Snapshot and Abort, in order
	endOut    bool                  // EndOfInput was returned
	timedOut  map[CheckpointID]bool // aborted by a timeout, or by a coordinator's notice
	trace     strings.Builder
}

// simulate runs one seeded case and returns its trace and the first broken
// property.
func simulate(seed uint64) (trace string, err error) {
	r := rand.New(rand.NewPCG(seed, seed))
	n := 1 + r.IntN(4)
	m := &model{
		mode:      []Mode{ExactlyOnce, AtLeastOnce}[r.IntN(2)],
		streams:   genStreams(r, n),
		next:      make([]int, n),
		blocked:   make([]bool, n),
		ended:     make([]bool, n),
		delivered: make([]map[CheckpointID]bool, n),
		timedOut:  map[CheckpointID]bool{},
	}
	pTimeout, pNotice := 0.0, 0.0 // per step: the task's alignment timer expires, the coordinator's abort notice comes
	if r.IntN(3) == 0 {
		pTimeout = r.Float64() * 0.3
	}
	if r.IntN(3) == 0 {
		pNotice = r.Float64() * 0.2
	}
	m.a = NewAligner(n, m.mode)
	fmt.Fprintf(&m.trace, "%v, %d inputs\n", m.mode, n)
	for i, s := range m.streams {
		m.delivered[i] = map[CheckpointID]bool{}
		fmt.Fprintf(&m.trace, "stream %d: %v\n", i, s)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
		trace = m.trace.String()
	}()
	for {
		var readable []int
		for i := range n {
			if !m.blocked[i] && m.next[i] < len(m.streams[i]) {
				readable = append(readable, i)
			}
		}
		if len(readable) == 0 {
			return "", m.checkOutcome()
		}
		if r.Float64() < pNotice {
			// The newest id seen, one before or one after (never below 0).
			id, _ := m.a.Pending()
			id = max(id+CheckpointID(r.IntN(3)), 1) - 1
			if err := m.notice(id); err != nil {
				return "", err
			}
			continue
		}
		if r.Float64() < pTimeout {
			// Mostly the pending id's timer; sometimes a stale or unknown one.
			id, _ := m.a.Pending()
			id += CheckpointID(r.IntN(3)) - 1
			if err := m.timeout(id); err != nil {
				return "", err
			}
			continue
		}
		i := readable[r.IntN(len(readable))]
		if err := m.step(i); err != nil {
			return "", err
		}
	}
}

// notice tells the aligner that the coordinator aborted id (and every
// earlier one): a pending alignment of an id ≤ id is aborted, and no id ≤ id
// not decided yet is ever snapshotted.
func (m *model) notice(id CheckpointID) error {
	pending, ok := m.a.Pending()
	ok = ok && pending <= id
	acts := m.a.OnAborted(id)
	fmt.Fprintf(&m.trace, "aborted %d -> %v\n", id, acts)
	for older := range id + 1 {
		if !m.snapshotted(older) {
			m.timedOut[older] = true
		}
	}
	if !ok {
		if len(acts) > 0 {
			return fmt.Errorf("abort notice %d with nothing at or below it pending: %v", id, acts)
		}
		return m.checkState()
	}
	if len(acts) == 0 || acts[0].Kind != Abort || acts[0].ID != pending || acts[0].Reason != CoordinatorAborted {
		return fmt.Errorf("abort notice %d: %v, want the abort of the pending %d", id, acts, pending)
	}
	if err := m.decide(acts[0], pending); err != nil {
		return err
	}
	for _, act := range acts[1:] {
		if act.Kind != Resume || !slices.Contains(m.blocked, true) {
			return fmt.Errorf("abort notice %d: unexpected %v", id, act)
		}
		clear(m.blocked)
	}
	return m.checkState()
}

func (m *model) snapshotted(id CheckpointID) bool {
	return slices.ContainsFunc(m.decided, func(d Action) bool { return d.Kind == Snapshot && d.Barrier.ID == id })
}

// timeout fires the alignment timer of id: it aborts id if, and only if,
// id is being aligned in exactly-once mode, naming exactly the live inputs
// that have not delivered its barrier.
func (m *model) timeout(id CheckpointID) error {
	pending, ok := m.a.Pending()
	ok = ok && pending == id && m.mode == ExactlyOnce
	acts := m.a.OnAlignmentTimeout(id)
	fmt.Fprintf(&m.trace, "timeout %d -> %v\n", id, acts)
	if !ok {
		if len(acts) > 0 {
			return fmt.Errorf("timeout %d with nothing of that id pending: %v", id, acts)
		}
		return nil
	}
	var late []int
	for j := range m.streams {
		if !m.ended[j] && !m.delivered[j][id] {
			late = append(late, j)
		}
	}
	if len(acts) == 0 || acts[0].Kind != Abort || acts[0].ID != id || acts[0].Reason != AlignmentTimedOut || !slices.Equal(acts[0].Late, late) {
		return fmt.Errorf("timeout %d: %v, want an abort naming late inputs %v", id, acts, late)
	}
	if err := m.decide(acts[0], id); err != nil {
		return err
	}
	m.timedOut[id] = true
	for _, act := range acts[1:] {
		if act.Kind != Resume || !slices.Contains(m.blocked, true) {
			return fmt.Errorf("timeout %d: unexpected %v", id, act)
		}
		clear(m.blocked)
	}
	return m.checkState()
}

// step reads the next event of input i and applies the aligner's actions.
func (m *model) step(i int) error {
	if m.blocked[i] {
		return fmt.Errorf("read blocked input %d", i)
	}
	e := m.streams[i][m.next[i]]
	m.next[i]++
	var acts []Action
	switch e.kind {
	case barrierEvent:
		m.delivered[i][e.id] = true
		acts = m.a.OnBarrier(i, Barrier{ID: e.id})
	case cancelEvent:
		acts = m.a.OnCancel(i, e.id)
	case endEvent:
		m.ended[i] = true
		acts = m.a.OnEndOfInput(i)
	}
	fmt.Fprintf(&m.trace, "input %d: %v -> %v\n", i, e, acts)
	for _, act := range acts {
		if err := m.apply(i, e, act); err != nil {
			return fmt.Errorf("input %d: %v -> %v: %w", i, e, act, err)
		}
	}
	return m.checkState()
}

func (m *model) apply(i int, e event, act Action) error {
	switch act.Kind {
	case Block:
		if m.mode != ExactlyOnce || act.Input != i || e.kind != barrierEvent || m.blocked[i] {
			return fmt.Errorf("unexpected block")
		}
		m.blocked[i] = true
	case Resume:
		if !slices.Contains(m.blocked, true) {
			return fmt.Errorf("resume with nothing blocked")
		}
		clear(m.blocked)
	case Snapshot:
		if err := m.decide(act, act.Barrier.ID); err != nil {
			return err
		}
		return m.checkSnapshot(act.Barrier.ID)
	case Abort:
		// Only a cancel for this id or a later one, or a later barrier,
		// aborts a checkpoint.
		if e.kind == endEvent || e.kind == record || e.id < act.ID || (e.kind == barrierEvent && e.id == act.ID) {
			return fmt.Errorf("abort without a cancel or a newer barrier")
		}
		return m.decide(act, act.ID)
	case EndOfInput:
		if m.endOut || slices.Contains(m.ended, false) {
			return fmt.Errorf("end-of-input twice or with a live input")
		}
		m.endOut = true
	default:
		return fmt.Errorf("unknown action")
	}
	return nil
}

// decide checks that id is decided once and after every earlier decision.
func (m *model) decide(act Action, id CheckpointID) error {
	for _, d := range m.decided {
		did := d.ID
		if d.Kind == Snapshot {
			did = d.Barrier.ID
		}
		if did == id {
			return fmt.Errorf("id already decided by %v", d)
		}
		if did > id {
			return fmt.Errorf("id decided after %v", d)
		}
	}
	m.decided = append(m.decided, act)
	return nil
}

// checkSnapshot checks that every live input delivered barrier id; in
// exactly-once, that it read nothing after it: its last event is that barrier.
func (m *model) checkSnapshot(id CheckpointID) error {
	for j := range m.streams {
		switch {
		case m.ended[j]:
		case !m.delivered[j][id]:
			return fmt.Errorf("input %d has not delivered the barrier", j)
		case m.mode == ExactlyOnce && m.streams[j][m.next[j]-1] != (event{kind: barrierEvent, id: id}):
			return fmt.Errorf("input %d read past the barrier", j)
		}
	}
	return nil
}

// checkState compares the model with the aligner after each step.
func (m *model) checkState() error {
	live := 0
	for j := range m.streams {
		if m.a.Blocked(j) != m.blocked[j] || m.a.Ended(j) != m.ended[j] {
			return fmt.Errorf("input %d: aligner says blocked=%v ended=%v, model %v %v",
				j, m.a.Blocked(j), m.a.Ended(j), m.blocked[j], m.ended[j])
		}
		if !m.ended[j] && !m.blocked[j] {
			live++
		}
	}
	if live == 0 && slices.Contains(m.blocked, true) {
		return fmt.Errorf("every live input is blocked")
	}
	return nil
}

// checkOutcome runs once nothing is readable. In exactly-once the snapshots
// are known from the streams alone: id N is snapshotted exactly when some
// input carries barrier N and every input either carries it or ended before
// any id ≥ N, unless its alignment timed out. End-of-input is returned
// exactly when every stream ended.
func (m *model) checkOutcome() error {
	if all := !slices.Contains(m.ended, false); all != m.endOut {
		return fmt.Errorf("every input ended: %v, end-of-input returned: %v", all, m.endOut)
	}
	if m.mode != ExactlyOnce {
		for j, s := range m.streams {
			if m.next[j] < len(s) {
				return fmt.Errorf("at-least-once left input %d unread", j)
			}
		}
		return nil
	}
	var want, got []CheckpointID
	for id := range CheckpointID(16) {
		carried, agree := false, true
		for _, s := range m.streams {
			if slices.Contains(s, event{kind: barrierEvent, id: id}) {
				carried = true
			} else if !endsBefore(s, id) {
				agree = false
			}
		}
		if carried && agree && !m.timedOut[id] {
			want = append(want, id)
		}
	}
	for _, d := range m.decided {
		if d.Kind == Snapshot {
			got = append(got, d.Barrier.ID)
		}
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("snapshots %v, want %v", got, want)
	}
	return nil
}

// endsBefore reports whether stream s ends with no barrier or cancel of an
// id ≥ id.
func endsBefore(s []event, id CheckpointID) bool {
	if len(s) == 0 || s[len(s)-1].kind != endEvent {
		return false
	}
	return !slices.ContainsFunc(s, func(e event) bool {
		return (e.kind == barrierEvent || e.kind == cancelEvent) && e.id >= id
	})
}
