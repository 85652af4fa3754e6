package watermark

import "fmt"

// Change is what a Valve's output did after one input event. When both are
// set, the watermark comes first, then the status: a subtask forwards the
// new watermark, then tells that it went idle.
type Change struct {
	// Advanced: the output watermark moved forward to Watermark.
	Advanced  bool
	Watermark int64
	// Idle: the output became idle (every channel is). Active: it became
	// active again (some channel is).
	Idle, Active bool
}

// Channel is the state of one input channel of a Valve.
type Channel struct {
	Watermark int64 // the largest watermark the channel delivered
	Idle      bool
	// Aligned: the channel counts in the minimum. An active channel is
	// aligned unless it became active again behind the output and has not
	// caught up yet.
	Aligned bool
}

// Valve combines the watermarks and statuses of a subtask's input channels
// (Flink's StatusWatermarkValve is the model). It is not safe for concurrent
// use: the task goroutine owns it.
type Valve struct {
	chans []Channel
	out   int64
	idle  bool
}

// NewValve returns a valve for n channels (n ≥ 1), every one active with no
// watermark yet, and output floor: the valve emits nothing at or below it
// (Min for a fresh start; the restored watermark of a subtask).
func NewValve(n int, floor int64) *Valve {
	if n < 1 {
		panic(fmt.Sprintf("watermark: valve needs at least one channel, got %d", n))
	}
	v := &Valve{chans: make([]Channel, n), out: floor}
	for i := range v.chans {
		v.chans[i] = Channel{Watermark: Min, Aligned: true}
	}
	return v
}

// State returns the output watermark, whether the output is idle, and a copy
// of the channels.
func (v *Valve) State() (out int64, idle bool, chans []Channel) {
	return v.out, v.idle, append([]Channel(nil), v.chans...)
}

// Output returns the output watermark and whether the output is idle.
func (v *Valve) Output() (int64, bool) { return v.out, v.idle }

// Channels returns the number of channels.
func (v *Valve) Channels() int { return len(v.chans) }

func (v *Valve) check(ch int) {
	if ch < 0 || ch >= len(v.chans) {
		panic(fmt.Sprintf("watermark: channel %d out of [0, %d)", ch, len(v.chans)))
	}
}

// Watermark handles watermark w arriving on channel ch. A watermark on an
// idle channel, or not above the channel's, is ignored (upstream announces
// Active before it delivers watermarks again).
func (v *Valve) Watermark(ch int, w int64) Change {
	v.check(ch)
	c := &v.chans[ch]
	if c.Idle || w <= c.Watermark {
		return Change{}
	}
	c.Watermark = w
	if !c.Aligned && w >= v.out {
		c.Aligned = true // caught up
	}
	return v.advanceToMin()
}

// Idle handles channel ch announcing that it is idle.
func (v *Valve) Idle(ch int) Change {
	v.check(ch)
	c := &v.chans[ch]
	if c.Idle {
		return Change{}
	}
	c.Idle, c.Aligned = true, false
	for _, o := range v.chans {
		if !o.Idle {
			return v.advanceToMin()
		}
	}
	// Every channel is idle: none will advance, so the largest watermark
	// any delivered is safe to emit, then the output goes idle.
	chg := Change{Idle: true}
	top := Min
	for _, o := range v.chans {
		top = max(top, o.Watermark)
	}
	if top > v.out {
		v.out = top
		chg.Advanced, chg.Watermark = true, top
	}
	v.idle = true
	return chg
}

// Active handles channel ch announcing that it is active again. It counts in
// the minimum once its watermark reached the output.
func (v *Valve) Active(ch int) Change {
	v.check(ch)
	c := &v.chans[ch]
	if !c.Idle {
		return Change{}
	}
	c.Idle = false
	c.Aligned = c.Watermark >= v.out
	if v.idle {
		v.idle = false
		return Change{Active: true}
	}
	return Change{}
}

// advanceToMin emits the minimum over the aligned channels if it is above
// the output.
func (v *Valve) advanceToMin() Change {
	low, any := Max, false
	for _, c := range v.chans {
		if c.Aligned {
			low, any = min(low, c.Watermark), true
		}
	}
	if !any || low <= v.out {
		return Change{}
	}
	v.out = low
	return Change{Advanced: true, Watermark: low}
}
