package pipelines

import (
	"testing"
	"time"
)

func TestTableWindowBounds(t *testing.T) {
	w := &TableWindow{Size: time.Minute}
	for _, c := range []struct{ at, start string }{
		{"2026-12-02T01:00:00Z", "2026-12-02T01:00:00Z"},
		{"2026-12-02T01:00:59.999Z", "2026-12-02T01:00:00Z"},
		{"2026-12-02T01:01:00Z", "2026-12-02T01:01:00Z"},
		{"1969-12-31T23:59:30Z", "1969-12-31T23:59:00Z"}, // before the epoch: floor, not toward zero
		{"1969-12-31T23:59:00Z", "1969-12-31T23:59:00Z"},
	} {
		at, _ := time.Parse(time.RFC3339Nano, c.at)
		want, _ := time.Parse(time.RFC3339Nano, c.start)
		start, end := w.Bounds(at)
		if !start.Equal(want) || !end.Equal(want.Add(time.Minute)) {
			t.Errorf("Bounds(%s) = [%s, %s), want [%s, +1m)", c.at, start, end, c.start)
		}
	}
}

// TestWindowLateDefaults: the late policy defaults to update with emit:
// updates (no watermark consulted) and to drop with final; the dead letters
// of late: dead_letter go to the topic of the source with on_error:
// dead_letter.
func TestWindowLateDefaults(t *testing.T) {
	const src = `
job: {name: j}
source:
  kafka:
    topics: [a]
    schema: {user: string, at: timestamp}
    event_time: {field: at}
    on_error: dead_letter
    dead_letter_topic: dl
sink:
  - table: {name: t1, primary_key: [user], columns: {c: {agg: count}}, window: {tumble: 1m, on: at}}
  - table: {name: t2, primary_key: [user], columns: {c: {agg: count}}, window: {tumble: 1m, on: at, emit: final, allowed_lateness: 30s}}
  - table: {name: t3, primary_key: [user], columns: {c: {agg: count}}, window: {tumble: 1m, on: at, late: dead_letter}}
`
	ps, err := Load([]File{{Name: "late.yaml", Data: []byte(src)}}, Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	ws := make([]TableWindow, 3)
	for i, tab := range ps[0].Tables {
		ws[i] = *tab.Window
	}
	if w := ws[0]; w.Final || w.Late != LateUpdate || w.Watermarked() || w.Lateness != 0 {
		t.Errorf("updates window: %+v, want late update, no watermark", w)
	}
	if w := ws[1]; !w.Final || w.Late != LateDrop || !w.Watermarked() || w.Lateness != 30*time.Second {
		t.Errorf("final window: %+v, want late drop, lateness 30s", w)
	}
	end := time.Date(2026, 12, 2, 1, 1, 0, 0, time.UTC)
	if got, want := ws[1].ClosesAt(end), end.Add(30*time.Second).UnixNano()-1; got != want {
		t.Errorf("ClosesAt = %d, want %d (end - 1ns + lateness)", got, want)
	}
	if w := ws[2]; w.Final || w.Late != LateDeadLetter || w.DeadLetter == nil || w.DeadLetter.DeadLetterTopic != "dl" {
		t.Errorf("dead-letter window: %+v, want the source's topic dl", w)
	}
}

// TestSessionWindowDefaults: a session window takes late: drop by default
// (in both emit modes) and always consults the watermark; a record is late
// once the watermark reached its own time plus the allowed lateness.
func TestSessionWindowDefaults(t *testing.T) {
	const src = `
job: {name: j}
source:
  kafka: {topics: [a], schema: {user: string, at: timestamp}, event_time: {field: at}}
sink:
  - table: {name: t1, primary_key: [user], columns: {c: {agg: count}}, window: {session: 30s, on: at}}
  - table: {name: t2, primary_key: [user], columns: {c: {agg: count}}, window: {session: 30s, on: at, emit: final, allowed_lateness: 5s}}
`
	ps, err := Load([]File{{Name: "session.yaml", Data: []byte(src)}}, Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	w1, w2 := ps[0].Tables[0].Window, ps[0].Tables[1].Window
	if w1.Gap != 30*time.Second || w1.Final || w1.Late != LateDrop || !w1.Watermarked() || w1.Expanded() {
		t.Errorf("updates session window: %+v, want gap 30s, late drop, watermarked, not expanded", *w1)
	}
	if w2.Gap != 30*time.Second || !w2.Final || w2.Late != LateDrop || w2.Lateness != 5*time.Second {
		t.Errorf("final session window: %+v, want gap 30s, late drop, lateness 5s", *w2)
	}
	at := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC).UnixNano()
	if w2.SessionLate(at, at+int64(5*time.Second)-1) || !w2.SessionLate(at, at+int64(5*time.Second)) {
		t.Errorf("a session record at t is late from watermark t + lateness on")
	}
}
