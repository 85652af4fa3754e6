package pipelines

import (
	"strings"
	"time"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"

	"github.com/ebbflow/ebbflow/runtime/watermark"
)

// windowSize checks a window's length (tumble, or hop with every): whole
// milliseconds, at least 1ms, every dividing hop, at most
// watermark.MaxWindowsPerTime windows per record. A session window has no
// size (windowGap).
func (v *validator) windowSize(path string, w *Window) (watermark.Windows, bool) {
	ms := func(key string, d time.Duration) bool { return v.windowMs(path+"."+key, d) }
	tumble, hop := v.given(path+".tumble"), v.given(path+".hop")
	switch {
	case v.given(path + ".session"):
		return watermark.Windows{}, true // windowGap checks it
	case tumble && hop: // the decoder reported it
	case tumble:
		if v.given(path + ".every") {
			v.fail(path+".every", "every goes with hop (a tumbling window starts where the last ended)")
			return watermark.Windows{}, false
		}
		d := w.Tumble.Std()
		return watermark.Windows{Size: d, Slide: d}, ms("tumble", d)
	case hop:
		if !v.given(path + ".every") {
			v.fail(path+".hop", "hop needs every: the time between the starts of two windows")
			return watermark.Windows{}, false
		}
		ws := watermark.Windows{Size: w.Hop.Std(), Slide: w.Every.Std()}
		if !ms("hop", ws.Size) || !ms("every", ws.Slide) {
			return ws, false
		}
		switch {
		case ws.Slide > ws.Size:
			v.fail(path+".every", "every %s exceeds hop %s: the windows would leave gaps", ws.Slide, ws.Size)
		case ws.Size%ws.Slide != 0:
			v.fail(path+".every", "hop %s is not a multiple of every %s", ws.Size, ws.Slide)
		case ws.Count() > watermark.MaxWindowsPerTime:
			v.fail(path+".every", "hop %s / every %s puts every record in %d windows; at most %d", ws.Size, ws.Slide, ws.Count(), watermark.MaxWindowsPerTime)
		default:
			return ws, true
		}
		return ws, false
	}
	return watermark.Windows{}, false // the decoder reported it
}

// windowMs checks a window's duration at path: whole milliseconds, at
// least 1ms.
func (v *validator) windowMs(path string, d time.Duration) bool {
	if d < time.Millisecond || d%time.Millisecond != 0 {
		v.fail(path, "%s: a window is at least 1ms, a whole number of milliseconds", d)
		return false
	}
	return true
}

// windowGap checks a session window's gap (0 when not a session window):
// whole milliseconds, no every, and columns whose functions combine their
// partials in any order: a record that bridges two sessions merges them,
// combining the partials of both, whose records interleaved in arrival
// order, so first_value, last_value and listagg would come out depending on
// which session was first, not on the order of the records.
func (v *validator) windowGap(path string, w *Window, cols []TableColumn) (time.Duration, bool) {
	if !v.given(path + ".session") {
		return 0, true
	}
	ok := v.windowMs(path+".session", w.Session.Std())
	if v.given(path + ".every") {
		v.fail(path+".every", "every goes with hop (a session ends where its records stop)")
		ok = false
	}
	table := strings.TrimSuffix(path, ".window")
	for _, c := range cols {
		f, err := agg.New(c.Func, c.Type, c.Params)
		if err != nil || f.Commutative() {
			continue // a bad column is reported
		}
		v.fail(table+".columns."+c.Name+".agg", "%s depends on the order of its inputs, and a session window combines the partials of the sessions a record merges whatever came first; with session windows use %s",
			c.Func, strings.Join(commutative(c.Type), ", "))
		ok = false
	}
	return w.Session.Std(), ok
}

// commutative lists the functions for columns of type t whose partials
// combine in any order.
func commutative(t agg.Type) []string {
	var out []string
	for _, name := range agg.Names() {
		if f, err := agg.New(name, t, nil); err == nil && f.Commutative() {
			out = append(out, name)
		}
	}
	return out
}

// windowRetain checks a window's retention: not negative, and event time on
// every source (watermarks delete the windows).
func (v *validator) windowRetain(path string, w *Window) (*time.Duration, bool) {
	if w.Retain == nil {
		return nil, true
	}
	d := w.Retain.Std()
	if d < 0 {
		v.fail(path+".retain", "duration %q is negative", d)
		return nil, false
	}
	if !v.eventTimeEverywhere(path+".retain", "retain") {
		return nil, false
	}
	return &d, true
}

// Expanded reports whether the window is hopping or has a retention.
// Then, unless it is Watermarked (a window operator assigns a record's
// windows and puts their bounds in the keys it emits), the writer assigns
// the windows of a record itself (writer.Config.Window); a plain tumbling
// window's bounds are part of the key the mapper gives.
func (w *TableWindow) Expanded() bool { return w.Slide != w.Size || w.Retain != nil }

// windowRetainLateness checks that a window that closes on the watermark is
// retained at least as long as it takes records: a window is deleted at its
// end plus retain and closes at its end minus 1ns plus the allowed
// lateness, so a shorter retention would delete a window still open (and
// drop its final row at the sink).
func (v *validator) windowRetainLateness(path string, w *TableWindow) bool {
	if !w.Watermarked() || w.Retain == nil || *w.Retain >= w.Lateness {
		return true
	}
	v.fail(path+".retain", "retain %s is less than allowed_lateness %s: a window would be deleted before it closes", *w.Retain, w.Lateness)
	return false
}

// eventTimeEverywhere reports whether every source of the job emits
// watermarks, failing at path (for what) when one does not: a source
// without event time holds the watermark back for good.
func (v *validator) eventTimeEverywhere(path, what string) bool {
	for i := range v.spec.Sources {
		src := &v.spec.Sources[i]
		if src.Kafka != nil && src.Kafka.EventTime != nil {
			continue
		}
		kind := src.Kind()
		if kind == "" {
			return false // reported
		}
		v.fail(path, "%s needs watermarks from every source: %s has no event_time (only kafka sources have one)", what, v.elem("source", i)+"."+kind)
		return false
	}
	return true
}
