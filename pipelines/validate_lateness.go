package pipelines

import (
	"time"
)

// lateness checks a window's emit mode, allowed lateness and late policy
// into tw, filling in the policy's default (update for emit: updates, drop
// for final and session windows). A window that consults the watermark needs event time from
// every source, and dead letters need a source's dead-letter topic.
func (v *validator) lateness(path string, tw *TableWindow) bool {
	ok := true
	if tw.Late == "" {
		tw.Late = LateUpdate
		if tw.Final || tw.Gap > 0 {
			tw.Late = LateDrop
		}
	}
	if d := tw.Lateness; d%time.Millisecond != 0 {
		v.fail(path+".allowed_lateness", "%s: a whole number of milliseconds", d)
		ok = false
	}
	switch {
	case tw.Final && tw.Late == LateUpdate:
		v.fail(path+".late", "late: update is only for emit: updates (a final row is written once); use drop or dead_letter")
		return false
	case tw.Gap > 0 && tw.Late == LateUpdate:
		v.fail(path+".late", "late: update does not go with session windows: a session's state is dropped once it closed, so a late record could not merge into it; use drop or dead_letter")
		return false
	case !tw.Watermarked() && v.given(path+".allowed_lateness"):
		v.fail(path+".allowed_lateness", "is used only with emit: final or late: drop or dead_letter (late: update consults no watermark)")
		ok = false
	}
	if !tw.Watermarked() {
		return ok
	}
	where, what := path+".late", "late: "+string(tw.Late)
	switch {
	case tw.Gap > 0:
		where, what = path+".session", "a session window"
	case tw.Final:
		where, what = path+".emit", "emit: final"
	}
	if v.changelog != "" && (tw.Final || tw.Gap > 0) {
		v.fail(where, "%s does not take the retractions of a changelog source (format %s)", what, v.changelog)
		ok = false
	}
	for i := range v.spec.Sources {
		src := &v.spec.Sources[i]
		if src.Kafka == nil || src.Kafka.EventTime == nil {
			v.fail(where, "%s needs event time from every source: source %q has no event_time (a window closes when the watermark passes it)",
				what, src.Name)
			ok = false
			break
		}
	}
	if tw.Late != LateDeadLetter {
		return ok
	}
	for i := range v.spec.Sources {
		k := v.spec.Sources[i].Kafka
		if k == nil || k.OnError != OnErrorDeadLetter {
			continue
		}
		switch d := tw.DeadLetter; {
		case d == nil:
			tw.DeadLetter = k
		case d.DeadLetterTopic != k.DeadLetterTopic || !d.sameCluster(&k.Connection):
			v.fail(path+".late", "late: dead_letter: the sources' dead-letter topics differ (%q on %s, %q on %s); late records need one",
				d.DeadLetterTopic, d.Cluster(), k.DeadLetterTopic, k.Cluster())
			return false
		}
	}
	if tw.DeadLetter == nil {
		v.fail(path+".late", "late: dead_letter needs a Kafka source with on_error: dead_letter: late records go to its dead_letter_topic")
		ok = false
	}
	return ok
}
