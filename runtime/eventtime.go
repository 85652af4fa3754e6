package runtime

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/ebbflow/ebbflow/state"
)

// Event-time timers fire when the watermark passes them, on the task
// goroutine, in order of time and, at equal times, of the encoded key.
// Keyed timers live in the processor's keyed state (checkpointed and
// rescaled by key group with it); an operator's live in its operator state.
// A restore rebuilds the queue from the state, so a restored job fires the
// timers its checkpoint held, at the same watermarks.

// timerName is the keyed state (and the operator-state list) that holds
// the timers: names starting with "ebbflow." are the runtime's.
const timerName = "ebbflow.timers"

// ErrNoTimerHandler: a processor or operator registered event-time timers
// but does not implement OnEventTime.
var ErrNoTimerHandler = errors.New("runtime: event-time timers without OnEventTime")

// EventTimeProcessor is implemented by keyed processors that register
// timers on EventTimers: OnEventTime is called once per registered (key,
// time) when the watermark reaches it.
type EventTimeProcessor[K comparable, Out any] interface {
	OnEventTime(key K, at int64, out *Collector[Out]) error
}

// WatermarkProcessor is implemented by keyed processors that act on event
// time for many keys at once rather than through a timer per key (a window
// operator firing every window of one end, from an index of its own):
// OnWatermark(w) is called on the task goroutine each time the processor's
// watermark advances to w, after its due timers fired and before w goes
// downstream. As with WatermarkSink, a restored processor hears no call
// for its restored floor (Context.Watermark tells it), only for the
// advances past it; it must rebuild what it acts on from its keyed state
// in Open, so that a restore acts at the same watermarks.
type WatermarkProcessor[Out any] interface {
	OnWatermark(w int64, out *Collector[Out]) error
}

// EventTimeOperator is implemented by operators that register timers with
// Context.RegisterEventTimer.
type EventTimeOperator[Out any] interface {
	OnEventTime(at int64, out *Collector[Out]) error
}

// WatermarkSink is implemented by sinks that act on event time (a table
// deleting its expired windows): OnWatermark(w) is called on the task
// goroutine each time the sink's watermark advances to w, after every record
// before w was written and before any after it. A restored sink hears no
// call for its restored floor (Context.Watermark tells it), only for the
// advances past it.
type WatermarkSink interface {
	OnWatermark(w int64) error
}

// timerEntry is one queued timer; the queue may hold entries of timers
// deleted since (their key's state tells), which are skipped.
type timerEntry[K any] struct {
	at  int64
	key K
}

// timerQueue is a min-heap of entries by time.
type timerQueue[K any] []timerEntry[K]

func (q *timerQueue[K]) push(e timerEntry[K]) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p].at <= h[i].at {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func (q *timerQueue[K]) pop() timerEntry[K] {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = timerEntry[K]{}
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h[l].at < h[m].at {
			m = l
		}
		if r < n && h[r].at < h[m].at {
			m = r
		}
		if m == i {
			break
		}
		h[m], h[i] = h[i], h[m]
		i = m
	}
	*q = h
	return top
}

// due pops every entry of the earliest time if it is at or before w, and
// returns them (reusing buf) with that time.
func (q *timerQueue[K]) due(w int64, buf []timerEntry[K]) ([]timerEntry[K], bool) {
	if len(*q) == 0 || (*q)[0].at > w {
		return buf, false
	}
	at := (*q)[0].at
	for len(*q) > 0 && (*q)[0].at == at {
		buf = append(buf, q.pop())
	}
	return buf, true
}

// EventTimers are the event-time timers of a keyed processor subtask: at
// most one per (key, time). Make them in Open with NewEventTimers; the
// processor must implement EventTimeProcessor. Use them on the task
// goroutine only (Process, OnEventTime).
type EventTimers[K comparable] struct {
	kc    state.Codec[K]
	times *state.Value[K, []int64] // per key its timers, ascending
	q     timerQueue[K]
	due   []timerEntry[K]
	keys  []byte // encoded keys of a due group, for ordering
	offs  []int
	order []int
}

// NewEventTimers registers the timers of the processor opening with ctx on
// its keyed state (as the state "ebbflow.timers") and restores the ones
// its checkpoint holds.
func NewEventTimers[K comparable](ctx *Context, keyed *state.Keyed, kc state.Codec[K]) (*EventTimers[K], error) {
	if ctx.events != nil {
		return nil, fmt.Errorf("operator %q: event-time timers made twice", ctx.Operator)
	}
	t := &EventTimers[K]{kc: kc, times: state.NewValue(keyed, timerName, kc, state.Codec[[]int64](int64sCodec{}))}
	err := t.times.Scan(func(k K, ats []int64) error {
		for _, at := range ats {
			t.q.push(timerEntry[K]{at: at, key: k})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("restore event-time timers of %q: %w", ctx.Operator, err)
	}
	ctx.events = t
	return t, nil
}

// DiscardEventTimers deletes every keyed event-time timer the processor
// opening on keyed restored (its state "ebbflow.timers"), for a processor
// that no longer uses EventTimers but may restore a checkpoint of a version
// that did; it returns how many keys had timers. Call it in Open, instead
// of NewEventTimers; the deletes go with the next checkpoint.
func DiscardEventTimers(keyed *state.Keyed) (int, error) {
	times := state.NewValue(keyed, timerName, state.StringCodec{}, state.Codec[[]byte](state.BytesCodec{}))
	var keys []string
	if err := times.Scan(func(k string, _ []byte) error {
		keys = append(keys, k)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("read the event-time timers to discard: %w", err)
	}
	for _, k := range keys {
		if err := times.Delete(k); err != nil {
			return 0, fmt.Errorf("discard event-time timers: %w", err)
		}
	}
	return len(keys), nil
}

// Register asks for an OnEventTime(key, at) call once the watermark reaches
// at (at the next advance if it already has). Registering a timer again
// changes nothing.
func (t *EventTimers[K]) Register(key K, at int64) error {
	ats, _, err := t.times.Get(key)
	if err != nil {
		return err
	}
	i, found := slices.BinarySearch(ats, at)
	if found {
		return nil
	}
	if err := t.times.Put(key, slices.Insert(slices.Clip(ats), i, at)); err != nil {
		return err
	}
	t.q.push(timerEntry[K]{at: at, key: key})
	return nil
}

// Delete cancels the timer of key at at, if any.
func (t *EventTimers[K]) Delete(key K, at int64) error {
	_, err := t.take(key, at)
	return err
}

// take removes the timer (key, at) from the state; ok reports that it was
// there.
func (t *EventTimers[K]) take(key K, at int64) (ok bool, err error) {
	ats, _, err := t.times.Get(key)
	if err != nil {
		return false, err
	}
	i, found := slices.BinarySearch(ats, at)
	if !found {
		return false, nil
	}
	if len(ats) == 1 {
		return true, t.times.Delete(key)
	}
	return true, t.times.Put(key, slices.Delete(slices.Clone(ats), i, i+1))
}

// fire calls fn for every timer at or before w, earliest first, ties in the
// order of the encoded key. Timers registered by fn at or before w fire in
// the same call.
func (t *EventTimers[K]) fire(w int64, fn func(key K, at int64) error) error {
	for {
		var ok bool
		t.due, ok = t.q.due(w, t.due[:0])
		if !ok {
			return nil
		}
		if err := t.fireGroup(fn); err != nil {
			return err
		}
	}
}

// fireGroup fires the due entries (all of one time) in key order, once per
// key.
func (t *EventTimers[K]) fireGroup(fn func(key K, at int64) error) error {
	group := t.due
	if len(group) > 1 {
		t.keys, t.offs, t.order = t.keys[:0], t.offs[:0], t.order[:0]
		for i, e := range group {
			t.offs = append(t.offs, len(t.keys))
			t.keys = t.kc.Append(t.keys, e.key)
			t.order = append(t.order, i)
		}
		t.offs = append(t.offs, len(t.keys))
		enc := func(i int) []byte { return t.keys[t.offs[i]:t.offs[i+1]] }
		sort.Slice(t.order, func(a, b int) bool { return bytes.Compare(enc(t.order[a]), enc(t.order[b])) < 0 })
	}
	for n := range group {
		i := n
		if len(group) > 1 {
			i = t.order[n]
		}
		e := group[i]
		ok, err := t.take(e.key, e.at) // a deleted or duplicate entry is gone from the state
		if err != nil {
			return err
		}
		if ok {
			if err := fn(e.key, e.at); err != nil {
				return err
			}
		}
	}
	clear(group)
	return nil
}

// int64sCodec encodes a key's timers: 8 bytes big-endian each.
type int64sCodec struct{}

func (int64sCodec) Append(dst []byte, v []int64) []byte {
	for _, x := range v {
		dst = binary.BigEndian.AppendUint64(dst, uint64(x))
	}
	return dst
}

func (int64sCodec) Decode(src []byte) ([]int64, error) {
	if len(src)%8 != 0 {
		return nil, fmt.Errorf("timers: %d bytes: %w", len(src), state.ErrCorrupt)
	}
	v := make([]int64, len(src)/8)
	for i := range v {
		v[i] = int64(binary.BigEndian.Uint64(src[8*i:]))
	}
	return v, nil
}

// operatorTimers are the event-time timers of an operator subtask (see
// Context.RegisterEventTimer), saved in its operator state.
type operatorTimers struct {
	set map[int64]struct{}
	q   timerQueue[struct{}]
	due []timerEntry[struct{}]
}

// RegisterEventTimer asks for one OnEventTime(at) call (see
// EventTimeOperator) once the watermark reaches at (at the next advance if it
// already has). The timers are checkpointed with the operator's state and
// restored; registering one again changes nothing. On the task goroutine
// only.
func (c *Context) RegisterEventTimer(at int64) {
	ts := c.operatorTimers()
	if _, ok := ts.set[at]; !ok {
		ts.set[at] = struct{}{}
		ts.q.push(timerEntry[struct{}]{at: at})
	}
}

// DeleteEventTimer cancels the timer RegisterEventTimer set at at, if any.
func (c *Context) DeleteEventTimer(at int64) { delete(c.operatorTimers().set, at) }

func (c *Context) operatorTimers() *operatorTimers {
	ts, ok := c.events.(*operatorTimers)
	if !ok {
		panic(fmt.Sprintf("runtime: %q: only operators (Apply) register event-time timers on their Context; keyed processors use EventTimers", c.Operator))
	}
	return ts
}

// restoreOperatorTimers takes the saved timers out of the operator's
// restored state (the operator never sees them).
func restoreOperatorTimers(c *Context) error {
	c.events = &operatorTimers{set: map[int64]struct{}{}}
	items := c.State.Lists[timerName]
	delete(c.State.Lists, timerName)
	for _, item := range items {
		if len(item) != 8 {
			return fmt.Errorf("restore event-time timer: %d bytes: %w", len(item), state.ErrCorrupt)
		}
		c.RegisterEventTimer(int64(binary.BigEndian.Uint64(item)))
	}
	return nil
}

// fire calls fn for every timer at or before w, earliest first.
func (ts *operatorTimers) fire(w int64, fn func(at int64) error) error {
	for {
		var ok bool
		ts.due, ok = ts.q.due(w, ts.due[:0])
		if !ok {
			return nil
		}
		at := ts.due[0].at
		if _, live := ts.set[at]; !live {
			continue // deleted (or a duplicate entry, re-registered after a delete)
		}
		delete(ts.set, at)
		if err := fn(at); err != nil {
			return err
		}
	}
}

// save adds the timers to the operator's snapshot, one list item each (a
// rescale spreads them over the new subtasks).
func (ts *operatorTimers) save(snap *state.SubtaskSnapshot) {
	if ts == nil || len(ts.set) == 0 {
		return
	}
	ats := make([]int64, 0, len(ts.set))
	for at := range ts.set {
		ats = append(ats, at)
	}
	slices.Sort(ats)
	items := make([][]byte, len(ats))
	for i, at := range ats {
		items[i] = binary.BigEndian.AppendUint64(nil, uint64(at))
	}
	if snap.Lists == nil {
		snap.Lists = map[string][][]byte{}
	}
	snap.Lists[timerName] = items
}

// Links: how operators and keyed processors fire their timers.

func (l *operatorLink[In, Out]) advanceWatermark(w int64) error {
	ts, _ := l.ctx.events.(*operatorTimers)
	if ts == nil {
		return nil
	}
	h, ok := l.op.(EventTimeOperator[Out])
	err := ts.fire(w, func(at int64) error {
		if !ok {
			return fmt.Errorf("%w: operator %q (%T)", ErrNoTimerHandler, l.ctx.Operator, l.op)
		}
		return h.OnEventTime(at, &l.out)
	})
	return errors.Join(err, l.out.done())
}

func (l *keyedLink[K, In, Out]) advanceWatermark(w int64) error {
	wp, onWatermark := l.proc.(WatermarkProcessor[Out])
	if l.timers == nil && !onWatermark {
		return nil
	}
	var err error
	if l.timers != nil {
		h := l.proc.(EventTimeProcessor[K, Out]) // checked at open
		err = l.timers.fire(w, func(key K, at int64) error { return h.OnEventTime(key, at, &l.out) })
	}
	if err == nil && onWatermark {
		err = wp.OnWatermark(w, &l.out)
	}
	return errors.Join(err, l.out.done())
}

// keyedTimers checks, after the processor opened, that a processor that made
// timers can fire them.
func (l *keyedLink[K, In, Out]) keyedTimers(ctx *Context) error {
	if ctx.events == nil {
		return nil
	}
	ts, ok := ctx.events.(*EventTimers[K])
	if !ok {
		return fmt.Errorf("operator %q: timers of another key type", ctx.Operator)
	}
	if _, ok := l.proc.(EventTimeProcessor[K, Out]); !ok {
		return fmt.Errorf("%w: keyed processor %q (%T)", ErrNoTimerHandler, ctx.Operator, l.proc)
	}
	l.timers = ts
	return nil
}
