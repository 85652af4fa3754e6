package runtime

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/ebbflow/ebbflow/state"
	"github.com/ebbflow/ebbflow/watermark"
)

// WatermarkSource is implemented by a Source that tracks event time (see
// package watermark and docs/EVENT_TIME.md). Sources without it emit no
// watermark until their input ends, so a stream fed by one holds event time
// back wherever it is combined with others.
type WatermarkSource interface {
	// Watermark returns the subtask's watermark at processing time now:
	// every record Read returns from now on has an event time after wm, or
	// is late. idle reports that the subtask has no data (its splits are
	// idle, or it has none) and must not hold back the watermark downstream;
	// wm then is the largest watermark of its splits. The task calls it after
	// a Read, every Options.WatermarkInterval; a wm at or below the one
	// emitted before is ignored, so it may go back (a split added, a split
	// active again) without moving event time back downstream.
	Watermark(now time.Time) (wm int64, idle bool)
}

// Watermark returns the current watermark of the operator: event time in
// Unix nanoseconds (watermark.Min before the first one, watermark.Max after
// its inputs ended). A record at or before it is late.
func (c *Context) Watermark() int64 { return c.wm }

// reservedUnion holds a task's watermark state in the snapshot of its
// chain's head, beside (and hidden from) the operator's own state.
const reservedUnion = "ebbflow.watermark"

// wmState is a task's event-time position: what its outputs were told last
// and, for a task with inputs, its valve.
type wmState struct {
	out  int64 // the last watermark emitted downstream
	idle bool  // the outputs were told the task is idle
}

// pollSource asks a watermark source for its watermark, at most every
// WatermarkInterval, and emits what changed.
func (t *task) pollSource(force bool) error {
	if t.wmSrc == nil {
		return nil
	}
	now := time.Now()
	if !force && now.Before(t.wmNext) {
		return nil
	}
	t.wmNext = now.Add(t.att.job.opts.WatermarkInterval)
	w, idle := t.wmSrc.Watermark(now)
	if idle {
		if w > t.wm.out {
			if err := t.advance(w); err != nil {
				return err
			}
		}
		return t.setIdle(true)
	}
	if err := t.setIdle(false); err != nil {
		return err
	}
	if w > t.wm.out {
		return t.advance(w)
	}
	return nil
}

// endOfEventTime is a source's last watermark: its input ended.
func (t *task) endOfEventTime() error {
	if err := t.setIdle(false); err != nil {
		return err
	}
	if t.wm.out < watermark.Max {
		return t.advance(watermark.Max)
	}
	return nil
}

// onValve carries out what the valve's output did.
func (t *task) onValve(c watermark.Change) error {
	if c.Advanced {
		if err := t.advance(c.Watermark); err != nil {
			return err
		}
	}
	switch {
	case c.Idle:
		return t.setIdle(true)
	case c.Active:
		return t.setIdle(false)
	}
	return nil
}

// advance moves the chain's event time to w: link by link, head first, each
// fires its event-time timers (their output goes down the chain before the
// next link advances), then w goes to the outputs, after every record
// before it.
func (t *task) advance(w int64) error {
	for k, l := range t.links {
		t.ctxs[k].wm = w
		if err := l.advanceWatermark(w); err != nil {
			return fmt.Errorf("advance the watermark of %q subtask %d to %s: %w", t.chain.nodes[k].uid, t.subtask, watermark.Format(w), err)
		}
	}
	t.wm.out = w
	t.stat.setWatermark(w)
	return t.emit(envelope{kind: evWatermark, wm: w})
}

// setIdle tells the outputs that the task became idle or active.
func (t *task) setIdle(idle bool) error {
	if t.wm.idle == idle {
		return nil
	}
	t.wm.idle = idle
	t.stat.wmIdle.Store(idle)
	kind := evActive
	if idle {
		kind = evIdle
	}
	return t.emit(envelope{kind: kind})
}

// announce tells the outputs, before anything else, the event-time position
// the task restored: a downstream subtask whose inputs changed since the
// checkpoint (a rescale) learns it, one that restored its channels exactly
// ignores it.
func (t *task) announce() error {
	for _, c := range t.ctxs {
		c.wm = t.wm.out
	}
	t.stat.setWatermark(t.wm.out)
	t.stat.wmIdle.Store(t.wm.idle)
	if t.wm.out > watermark.Min {
		if err := t.emit(envelope{kind: evWatermark, wm: t.wm.out}); err != nil {
			return err
		}
	}
	if t.wm.idle {
		return t.emit(envelope{kind: evIdle})
	}
	return nil
}

// wmLayout describes a task's inputs: its subtask, its parallelism and the
// parallelism of each input edge. Restoring a valve's channels needs the
// same layout.
func (t *task) wmLayout() []int {
	l := []int{t.subtask, t.chain.parallelism}
	for _, e := range t.chain.inputs {
		l = append(l, e.from.parallelism)
	}
	return l
}

// encodeWatermark saves the task's event-time position: its layout, output
// and, for a task with inputs, its channels.
func (t *task) encodeWatermark() []byte {
	b := []byte{1} // version
	layout := t.wmLayout()
	b = binary.AppendUvarint(b, uint64(len(layout)))
	for _, v := range layout {
		b = binary.AppendUvarint(b, uint64(v))
	}
	b = binary.BigEndian.AppendUint64(b, uint64(t.wm.out))
	b = appendBool(b, t.wm.idle)
	var chans []watermark.Channel
	if t.valve != nil {
		_, _, chans = t.valve.State()
	}
	b = binary.AppendUvarint(b, uint64(len(chans)))
	for _, c := range chans {
		b = binary.BigEndian.AppendUint64(b, uint64(c.Watermark))
		b = appendBool(b, c.Idle)
		b = appendBool(b, c.Aligned)
	}
	return b
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

type savedWatermark struct {
	layout []int
	out    int64
	idle   bool
	chans  []watermark.Channel
}

func decodeWatermark(b []byte) (savedWatermark, error) {
	var s savedWatermark
	bad := fmt.Errorf("decode watermark state: %w", state.ErrCorrupt)
	if len(b) < 1 || b[0] != 1 {
		return s, bad
	}
	b = b[1:]
	uv := func() (int, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<20 {
			return 0, false
		}
		b = b[n:]
		return int(v), true
	}
	n, ok := uv()
	if !ok {
		return s, bad
	}
	for range n {
		v, ok := uv()
		if !ok {
			return s, bad
		}
		s.layout = append(s.layout, v)
	}
	if len(b) < 9 {
		return s, bad
	}
	s.out, s.idle, b = int64(binary.BigEndian.Uint64(b)), b[8] == 1, b[9:]
	if n, ok = uv(); !ok || len(b) != 10*n {
		return s, bad
	}
	for range n {
		s.chans = append(s.chans, watermark.Channel{Watermark: int64(binary.BigEndian.Uint64(b)), Idle: b[8] == 1, Aligned: b[9] == 1})
		b = b[10:]
	}
	return s, nil
}

// restoreWatermark takes the task's saved event-time position out of the
// head operator's restored state (the operator never sees it). The subtask
// of the same layout gets its exact state back, valve channels included; at
// another layout (a rescale) the task restores the least output of the old
// subtasks as a floor, with fresh channels that learn their upstream's
// position from its announcement.
func (t *task) restoreWatermark(st *state.OperatorState) error {
	items := st.Unions[reservedUnion]
	delete(st.Unions, reservedUnion)
	if len(items) == 0 {
		return nil
	}
	layout := t.wmLayout()
	floor := watermark.Max
	for _, item := range items {
		s, err := decodeWatermark(item)
		if err != nil {
			return err
		}
		if slices.Equal(s.layout, layout) && (t.valve == nil) == (len(s.chans) == 0) &&
			(t.valve == nil || len(s.chans) == t.valve.Channels()) {
			t.wm = wmState{out: s.out, idle: s.idle}
			if t.valve != nil {
				t.valve = watermark.RestoreValve(s.out, s.idle, s.chans)
			}
			return nil
		}
		floor = min(floor, s.out)
	}
	t.wm = wmState{out: floor}
	if t.valve != nil {
		t.valve = watermark.NewValve(t.valve.Channels(), floor)
	}
	return nil
}
