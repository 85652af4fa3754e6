package runtime

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
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
// WatermarkInterval, and emits what changed. now is when the last Read
// returned (the clock read for the task's time accounting).
func (t *task) pollSource(now time.Time) error {
	if t.wmSrc == nil {
		return nil
	}
	if now.Before(t.wmNext) {
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
// the task restored, which its downstream subtasks' fresh channels start
// from.
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

// encodeWatermark saves the task's event-time position: the last watermark
// it emitted.
func (t *task) encodeWatermark() []byte {
	return binary.BigEndian.AppendUint64([]byte{1}, uint64(t.wm.out)) // version 1
}

// takeWatermarks takes the saved event-time positions out of an operator's
// restored state (the operator never sees them): the least of them, over
// every old subtask.
func takeWatermarks(st *state.OperatorState) (floor int64, ok bool, err error) {
	items := st.Unions[reservedUnion]
	delete(st.Unions, reservedUnion)
	floor = watermark.Max
	for _, item := range items {
		if len(item) != 9 || item[0] != 1 {
			return 0, false, fmt.Errorf("decode watermark state (%d bytes): %w", len(item), state.ErrCorrupt)
		}
		floor = min(floor, int64(binary.BigEndian.Uint64(item[1:])))
	}
	return floor, len(items) > 0, nil
}

// setFloor restores the task's event time: the least saved watermark of
// the operators of its chain (every subtask saves it beside each of its
// operators, so a chain built differently after a change of the job still
// finds it). The task emits no watermark at or below it, so its operators'
// event time never goes back across a restore, and a record that was late
// before it is late after.
//
// Only the floor is restored, never a valve's channels: splits may move
// between source subtasks on restore (operator lists are redistributed), so
// a channel's old watermark may not hold for what its upstream reads now.
// Fresh channels hold the output at the floor until every upstream, which
// announces its own restored floor first, has passed it. The least over all
// old subtasks is safe at any parallelism: a record after the checkpoint
// was on time at its source, so it is above its source's watermark, which
// every downstream watermark was at or below (idle inputs aside, whose
// records may be late anyway).
func (t *task) setFloor(floor int64) {
	t.wm = wmState{out: floor}
	if t.valve != nil {
		t.valve = watermark.NewValve(t.valve.Channels(), floor)
	}
}
