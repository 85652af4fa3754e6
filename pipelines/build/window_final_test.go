package build

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/state"
)

// The final-window oracle. Input comes in phases; between two phases the
// test waits until the job has read everything, every partition went idle
// and the watermark of the window operator is where a plain model says:
// the largest event time so far minus the bound minus 1ns (every split is
// idle, so the valves pass the largest watermark). Within a phase the
// watermark moves with processing time, but never past the phase's largest
// event time minus the bound, so the model only makes records whose fate
// is the same wherever the watermark falls:
//
//   - a record counts in a window when the window closes
//     (TableWindow.ClosesAt) after the highest watermark its phase can
//     reach: on time, or behind the watermark within the allowed lateness;
//   - a record is late for a window that closed at the watermark of the
//     phase before (the watermark never goes back);
//   - a record with a window between the two is not generated. A hopping
//     window's record may count in some of its windows and be late for
//     the others: each window is on its own.
//
// After each phase the table must hold exactly the windows the model has
// closed at the expected watermark (none early, each with its exact
// value), less those past retention; at the end its log must hold one +I
// per window and key, and a -D only for a window past retention, and the
// late records must be counted or dead-lettered, once per late window.

var seedFlag = flag.Int64("seed", 0, "seed of the randomized window tests (0: from the clock)")

// finalCase is one run of the oracle.
type finalCase struct {
	seed             int64
	parts, par, keys int // the last partition gets records in the first phase only, then idles
	phases, perPhase int
	size, lateness   time.Duration
	bound            time.Duration
	late             pipelines.LatePolicy // drop or dead_letter
	checkpoint       time.Duration        // the checkpoint interval (default 100ms)
	updates          bool                 // emit: updates (with late: drop or dead_letter)
	gap              time.Duration        // session windows with this gap instead of tumbling windows of size
	every            time.Duration        // hopping windows of size, one starting every this (0: tumbling)
	retain           time.Duration        // retain: a window is deleted once the watermark passes its end plus this (0: none)
}

// winKey is a window of a user; start and end in ns since the epoch (a
// time.Time compares its location too).
type winKey struct {
	user       string
	start, end int64
}

type winAcc struct{ total, n, top int64 }

// finalModel is the answer, computed by a plain program from the input.
type finalModel struct {
	c       finalCase
	w       pipelines.TableWindow
	rng     *rand.Rand
	windows map[winKey]winAcc  // tumbling windows
	counted map[string][]event // session windows: per user, the records that count
	late    map[int64]int      // amounts (unique) of the late records: for how many windows each
	front   time.Time          // the largest event time produced
	wm      int64              // the watermark once the last phase is read
	seq     int64
}

// event is a record of a session model: its event time and amount.
type event struct{ at, amount int64 }

func newFinalModel(c finalCase) *finalModel {
	slide := c.every
	if slide == 0 {
		slide = c.size
	}
	return &finalModel{c: c, w: pipelines.TableWindow{Size: c.size, Slide: slide, Gap: c.gap, Lateness: c.lateness}, rng: rand.New(rand.NewSource(c.seed)),
		windows: map[winKey]winAcc{}, counted: map[string][]event{}, late: map[int64]int{},
		front: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC), wm: watermark.Min}
}

// fate returns, for a record at event time at, the windows it counts in
// however high the watermark gets while its phase is read (up to highest),
// and for how many it is late (they closed at the watermark of the phase
// before); ok is false when a window is neither (ambiguous). A session
// record counts in one window (its session, the key left zero) or is late.
func (m *finalModel) fate(at time.Time, highest int64) (counts []winKey, late int, ok bool) {
	if m.c.gap > 0 {
		t := watermark.FromTime(at)
		switch {
		case !m.w.SessionLate(t, highest):
			return []winKey{{}}, 0, true
		case m.w.SessionLate(t, m.wm):
			return nil, 1, true
		}
		return nil, 0, false
	}
	for _, start := range (watermark.Windows{Size: m.w.Size, Slide: m.w.Slide}).Starts(nil, watermark.FromTime(at)) {
		end := start + int64(m.w.Size)
		switch closes := m.w.ClosesAt(time.Unix(0, end)); {
		case closes > highest:
			counts = append(counts, winKey{start: start, end: end})
		case closes <= m.wm:
			late++
		default:
			return nil, 0, false
		}
	}
	return counts, late, true
}

// phase makes the records of the next phase, applies them to the model and
// returns them; the model's watermark is then the one the job reaches
// once it has read them.
func (m *finalModel) phase(topic string, first bool) []*kgo.Record {
	c := m.c
	unit, advance := c.size, time.Duration(0)
	if c.gap == 0 {
		advance = c.size + time.Duration(m.rng.Int63n(int64(2*c.size/time.Millisecond)))*time.Millisecond
	} else {
		// Sessions chain across phases only sometimes: a phase's records that
		// count lie within the bound plus the lateness of its front.
		unit = c.gap
		advance = c.bound + c.lateness + time.Duration(m.rng.Int63n(int64(3*c.gap/time.Millisecond)))*time.Millisecond
	}
	m.front = m.front.Add(advance)
	highest := watermark.FromTime(m.front) - int64(c.bound) - 1 // the most the watermark reaches in this phase
	parts := c.parts
	if !first {
		parts-- // the last partition idles from now on
	}
	var recs []*kgo.Record
	add := func(at time.Time, user string, part int32) {
		m.seq++
		amount := m.seq
		counts, late, ok := m.fate(at, highest)
		if !ok {
			panic("ambiguous record generated")
		}
		for _, k := range counts {
			if c.gap > 0 {
				m.counted[user] = append(m.counted[user], event{watermark.FromTime(at), amount})
				continue
			}
			k.user = user
			a := m.windows[k]
			m.windows[k] = winAcc{a.total + amount, a.n + 1, max(a.top, amount)}
		}
		if late > 0 {
			m.late[amount] = late
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: part,
			Value: fmt.Appendf(nil, `{"user":%q,"amount":%d,"at":%q}`, user, amount, at.Format(time.RFC3339Nano))})
	}
	randomUser := func() string { return fmt.Sprintf("u%d", m.rng.Intn(c.keys)) }
	add(m.front, randomUser(), int32(m.rng.Intn(parts))) // the phase's largest event time
	span := int64((unit + c.lateness + c.bound + 3*unit) / time.Millisecond)
	if c.gap > 0 {
		span = int64((2*(c.lateness+c.bound) + 6*c.gap) / time.Millisecond) // late records too
	}
	for len(recs) < c.perPhase {
		at := m.front.Add(-time.Duration(m.rng.Int63n(span)) * time.Millisecond)
		if _, _, ok := m.fate(at, highest); ok {
			add(at, randomUser(), int32(m.rng.Intn(parts)))
		}
	}
	m.rng.Shuffle(len(recs)-1, func(i, j int) { recs[i+1], recs[j+1] = recs[j+1], recs[i+1] })
	if bridge := 8 * c.gap / 5; c.gap > 0 && bridge < c.bound+c.lateness {
		// A user of its own gets two sessions 1.6 gaps apart, then, after
		// them in the same partition, a record that bridges them: one
		// session, merged. All three count.
		a := m.front.Add(-bridge)
		for _, at := range []time.Time{a, m.front, a.Add(bridge / 2)} {
			add(at, "bridge", 0)
		}
	}
	m.wm = highest
	return recs
}

// all returns every window with a record that counted: the tumbling
// windows, or the sessions of the counted records (sorted by time, a new
// session wherever two are a gap or more apart).
func (m *finalModel) all() map[winKey]winAcc {
	if m.c.gap == 0 {
		return m.windows
	}
	out := map[winKey]winAcc{}
	for user, evs := range m.counted {
		evs = slices.SortedFunc(slices.Values(evs), func(a, b event) int { return cmp.Compare(a.at, b.at) })
		var k winKey
		var a winAcc
		for i, e := range evs {
			if i > 0 && e.at-evs[i-1].at >= int64(m.c.gap) {
				out[k] = a
				a = winAcc{}
			}
			if a.n == 0 {
				k.user, k.start = user, e.at
			}
			k.end = e.at + int64(m.c.gap)
			a = winAcc{a.total + e.amount, a.n + 1, max(a.top, e.amount)}
		}
		out[k] = a
	}
	return out
}

// expected returns what the table holds once the job read everything: the
// closed windows (emit: final), or every window with a record that counted
// (updates), less those past retention.
func (m *finalModel) expected() map[winKey]winAcc {
	out := maps.Clone(m.all())
	if !m.c.updates {
		out = m.closed()
	}
	maps.DeleteFunc(out, func(k winKey, _ winAcc) bool { return m.expired(k) })
	return out
}

// expired reports whether window k is past retention at the model's
// watermark (the sink's once it read everything).
func (m *finalModel) expired(k winKey) bool {
	return m.c.retain > 0 && k.end+int64(m.c.retain) <= m.wm
}

// closed returns the windows closed at the model's watermark.
func (m *finalModel) closed() map[winKey]winAcc {
	out := map[winKey]winAcc{}
	for k, a := range m.all() {
		if m.w.ClosesAt(time.Unix(0, k.end)) <= m.wm {
			out[k] = a
		}
	}
	return out
}

// finalJob is the job of a case: sum, count and max of the amounts per
// user and window, emitted final.
func finalJob(c finalCase, name string, brokers []string, topic, deadLetters string) string {
	dl := ""
	if c.late == pipelines.LateDeadLetter {
		dl = fmt.Sprintf("\n    on_error: dead_letter\n    dead_letter_topic: %s", deadLetters)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%dms", d/time.Millisecond) }
	emit := "final"
	if c.updates {
		emit = "updates"
	}
	window := "tumble: " + ms(c.size)
	switch {
	case c.gap > 0:
		window = "session: " + ms(c.gap)
	case c.every > 0:
		window = "hop: " + ms(c.size) + ", every: " + ms(c.every)
	}
	if c.retain > 0 {
		window += ", retain: " + ms(c.retain)
	}
	if c.checkpoint == 0 {
		c.checkpoint = 100 * time.Millisecond
	}
	return fmt.Sprintf(`
job: {name: %s, parallelism: %d}
source:
  kafka:
    brokers: [%s]
    topics: [%s]
    schema: {user: string, amount: int64, at: timestamp}
    event_time: {field: at, max_out_of_orderness: %s, idle_timeout: 300ms}%s
sink:
  table:
    name: per_window
    primary_key: [user]
    buckets: 4
    columns:
      total: {agg: sum, from: amount}
      n: {agg: count}
      top: {agg: max, from: amount}
    window: {%s, on: at, emit: %[11]s, allowed_lateness: %[8]s, late: %[9]s}
    changelog: {brokers: [%[3]s], topic: %[4]s-changelog, format: debezium-json}
checkpoint: {interval: %[10]s}
`, name, c.par, strings.Join(brokers, ","), topic, ms(c.bound), dl, window, ms(c.lateness), c.late, ms(c.checkpoint), emit)
}

// scanWindows reads the windowed table.
func scanWindows(t *testing.T, tab *aggmerge.Table) map[winKey]winAcc {
	t.Helper()
	got := map[winKey]winAcc{}
	if err := tab.Scan(func(r aggmerge.Row) error {
		got[winKey{r.Key[0].Str(), r.Key[1].Time().UnixNano(), r.Key[2].Time().UnixNano()}] = winAcc{r.Values[0].Int(), r.Values[1].Int(), r.Values[2].Int()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// diffWindows describes the first differences between got and want ("":
// equal).
func diffWindows(got, want map[winKey]winAcc) string {
	var d []string
	span := func(k winKey) string {
		return time.Unix(0, k.start).UTC().Format("15:04:05.000") + "-" + time.Unix(0, k.end).UTC().Format("15:04:05.000")
	}
	for _, k := range slices.SortedFunc(maps.Keys(want), cmpWin) {
		if g, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("window %s %s missing (want %v)", k.user, span(k), want[k]))
		} else if g != want[k] {
			d = append(d, fmt.Sprintf("window %s %s: %v, want %v", k.user, span(k), g, want[k]))
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(got), cmpWin) {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("window %s %s written early or never closed: %v", k.user, span(k), got[k]))
		}
	}
	if len(d) > 4 {
		d = append(d[:4], fmt.Sprintf("and %d more", len(d)-4))
	}
	return strings.Join(d, "; ")
}

func cmpWin(a, b winKey) int {
	if c := cmp.Compare(a.start, b.start); c != 0 {
		return c
	}
	return strings.Compare(a.user, b.user)
}

// waitFinal waits until every subtask of the window operator is at the
// model's watermark and the table holds exactly the model's closed
// windows. A watermark beyond the model's fails at once: the input cannot
// carry it there.
func waitFinal(t *testing.T, j *Job, tab *aggmerge.Table, m *finalModel, seed int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	want, diff := m.expected(), ""
	for {
		at, subtasks := true, 0
		for _, ts := range j.Status().Tasks {
			if !slices.Contains(ts.Operators, "per_window-window") {
				continue
			}
			subtasks++
			w := watermark.FromTime(ts.Watermark)
			if w > m.wm {
				t.Fatalf("seed %d: %s subtask %d at watermark %s, beyond the input's %s", seed, ts.Chain, ts.Subtask, watermark.Format(w), watermark.Format(m.wm))
			}
			at = at && w == m.wm
		}
		if at = at && subtasks == m.c.par; at {
			if diff = diffWindows(scanWindows(t, tab), want); diff == "" {
				return
			}
		}
		if time.Now().After(deadline) {
			st := j.Status()
			t.Fatalf("seed %d: at watermark %s: %v (restarts %d, last failure %+v); table: %s", seed, watermark.Format(m.wm), at, st.Restarts, st.LastFailure, diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkFinalLog checks what the table's log retains (it is truncated
// behind the checkpoints and the exporter): +I entries, each window once,
// with its final value, and -D entries only for the windows past retention
// (expired), each once, with that value.
func checkFinalLog(t *testing.T, tab *aggmerge.Table, want map[winKey]winAcc, expired func(winKey) bool, seed int64) {
	t.Helper()
	seen, deleted := map[winKey]bool{}, map[winKey]bool{}
	for b := range tab.Schema().Buckets {
		start, _, err := tab.LogOffsets(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := tab.ReadLog(b, start, func(e *aggmerge.Entry) error {
			if e.Key == nil {
				return nil // a marker
			}
			k := winKey{e.Key[0].Str(), e.Key[1].Time().UnixNano(), e.Key[2].Time().UnixNano()}
			if e.Op == aggmerge.Delete && expired(k) && !deleted[k] {
				if got := (winAcc{e.Before[0].Int(), e.Before[1].Int(), e.Before[2].Int()}); got != want[k] {
					return fmt.Errorf("window %v deleted as %v, want %v", k, got, want[k])
				}
				deleted[k] = true
				return nil
			}
			switch got := (winAcc{e.After[0].Int(), e.After[1].Int(), e.After[2].Int()}); {
			case e.Op != aggmerge.Insert:
				return fmt.Errorf("window %v: a %v entry in the log of a final table", k, e.Op)
			case seen[k]:
				return fmt.Errorf("window %v inserted twice", k)
			case got != want[k]:
				return fmt.Errorf("window %v inserted as %v, want %v", k, got, want[k])
			}
			seen[k] = true
			return nil
		}); err != nil {
			t.Fatalf("seed %d: log of bucket %d: %v", seed, b, err)
		}
	}
}

// checkChangelog checks the committed changelog topic (debezium-json,
// read_committed): one create ("op": "c", no before image) per window and
// key with its final value, and, after it, one delete ("op": "d") of each
// window past retention (expired), nothing else.
func checkChangelog(t *testing.T, brokers []string, topic string, want map[winKey]winAcc, expired func(winKey) bool, seed int64) {
	t.Helper()
	seen, deleted := map[winKey]winAcc{}, map[winKey]bool{}
	for k := range want {
		if expired(k) {
			deleted[k] = false
		}
	}
	for _, r := range kafkatest.ConsumeStable(t, brokers, topic) {
		var key struct {
			User  string    `json:"user"`
			Start time.Time `json:"window_start"`
			End   time.Time `json:"window_end"`
		}
		var v struct {
			Op     string          `json:"op"`
			Before json.RawMessage `json:"before"`
			After  struct{ Total, N, Top int64 }
		}
		if err := json.Unmarshal(r.Key, &key); err != nil {
			t.Fatalf("seed %d: changelog key %s: %v", seed, r.Key, err)
		}
		k := winKey{key.User, key.Start.UnixNano(), key.End.UnixNano()}
		if r.Value == nil {
			continue // the tombstone after a delete, for compaction
		}
		if err := json.Unmarshal(r.Value, &v); err == nil && v.Op == "d" {
			if done, ok := deleted[k]; !ok || done {
				t.Fatalf("seed %d: changelog record %s = %s: a delete of a window not past retention, or twice", seed, r.Key, r.Value)
			}
			if _, created := seen[k]; !created {
				t.Fatalf("seed %d: changelog record %s = %s: a delete before the window's creation", seed, r.Key, r.Value)
			}
			deleted[k] = true
			continue
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Op != "c" || string(v.Before) != "null" {
			t.Fatalf("seed %d: changelog record %s = %s: not the creation of a window (%v)", seed, r.Key, r.Value, err)
		}
		if _, dup := seen[k]; dup {
			t.Fatalf("seed %d: window %v twice in the changelog", seed, k)
		}
		seen[k] = winAcc{v.After.Total, v.After.N, v.After.Top}
	}
	if d := diffWindows(seen, want); d != "" {
		t.Fatalf("seed %d: the changelog: %s", seed, d)
	}
	for k, done := range deleted {
		if !done {
			t.Fatalf("seed %d: window %v past retention was not deleted in the changelog", seed, k)
		}
	}
}

// checkChangelogReplay replays the committed changelog topic
// (debezium-json, read_committed) of an updates table whose rows are
// deleted as sessions merge: creates, updates and deletes applied in order
// must end in want, and there must be deletes (merges happened).
func checkChangelogReplay(t *testing.T, brokers []string, topic string, want map[winKey]winAcc, seed int64) {
	t.Helper()
	got, deletes := map[winKey]winAcc{}, 0
	for _, r := range kafkatest.ConsumeStable(t, brokers, topic) {
		var key struct {
			User  string    `json:"user"`
			Start time.Time `json:"window_start"`
			End   time.Time `json:"window_end"`
		}
		var v struct {
			Op    string
			After *struct{ Total, N, Top int64 }
		}
		if r.Value == nil {
			continue // the tombstone after a delete, for compaction
		}
		if err := json.Unmarshal(r.Key, &key); err != nil {
			t.Fatalf("seed %d: changelog key %s: %v", seed, r.Key, err)
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("seed %d: changelog record %s = %s: %v", seed, r.Key, r.Value, err)
		}
		k := winKey{key.User, key.Start.UnixNano(), key.End.UnixNano()}
		_, exists := got[k]
		switch {
		case v.Op == "d" && exists:
			delete(got, k)
			deletes++
		case (v.Op == "c") != exists && v.After != nil && (v.Op == "c" || v.Op == "u"):
			got[k] = winAcc{v.After.Total, v.After.N, v.After.Top}
		default:
			t.Fatalf("seed %d: changelog record %s = %s on a row that exists: %v", seed, r.Key, r.Value, exists)
		}
	}
	if d := diffWindows(got, want); d != "" {
		t.Fatalf("seed %d: the changelog replayed: %s", seed, d)
	}
	if deletes == 0 {
		t.Fatalf("seed %d: no session merged (no delete in the changelog)", seed)
	}
	t.Logf("seed %d: the changelog replayed equals the model, %d rows deleted by merges or retention", seed, deletes)
}

// gaugeSum sums a gauge over its series.
func gaugeSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetGauge().GetValue()
			}
		}
	}
	return n
}

// lateCount sums ebbflow_late_records_total over the window's subtasks.
func lateCount(t *testing.T, reg *prometheus.Registry, policy pipelines.LatePolicy) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "ebbflow_late_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() != string(policy) {
					t.Fatalf("late records counted under policy %s, want %s", l.GetValue(), policy)
				}
			}
			n += m.GetCounter().GetValue()
		}
	}
	return int(n)
}

// runFinalCase runs a case: the phases, the checks after each, the log,
// the changelog and the late records at the end.
func runFinalCase(t *testing.T, c finalCase) {
	t.Logf("seed %d: %+v", c.seed, c)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, c.parts)
	deadLetters := topic + "-late"
	p := load(t, finalJob(c, "final", brokers, topic, deadLetters))
	reg := prometheus.NewRegistry()
	e := openEnv(t, Options{DataDir: t.TempDir(), Registerer: reg}, p)
	defer e.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	m := newFinalModel(c)
	kafkatest.Produce(t, brokers, m.phase(topic, true)...)
	stopExport := exportAll(t, e)
	j, done := startJob(t, ctx, e, p)
	tab, _ := e.Table("per_window")
	for i := range c.phases {
		if i > 0 {
			kafkatest.Produce(t, brokers, m.phase(topic, false)...)
		}
		waitFinal(t, j, tab, m, c.seed)
		t.Logf("phase %d: watermark %s, %d windows closed, %d in the table", i, watermark.Format(m.wm), len(m.closed()), len(m.expected()))
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatalf("seed %d: run: %v", c.seed, err)
	}
	want := m.closed()
	if len(want) == 0 || len(want) == len(m.all()) {
		t.Fatalf("seed %d: %d of %d windows closed: the case proves little", c.seed, len(want), len(m.all()))
	}
	if c.retain > 0 && !slices.ContainsFunc(slices.Collect(maps.Keys(m.all())), m.expired) {
		t.Fatalf("seed %d: no window past retention: the case proves little", c.seed)
	}
	stopExport(!c.updates || c.gap > 0 || c.retain > 0)
	switch {
	case !c.updates:
		checkFinalLog(t, tab, want, m.expired, c.seed)
		checkChangelog(t, brokers, topic+"-changelog", want, m.expired, c.seed)
	case c.gap > 0 || c.retain > 0: // merges and retention delete rows
		checkChangelogReplay(t, brokers, topic+"-changelog", m.expected(), c.seed)
	}
	late := 0
	for _, n := range m.late {
		late += n
	}
	if n := lateCount(t, reg, c.late); n != late {
		t.Fatalf("seed %d: %d late records counted (one per record and window), want %d", c.seed, n, late)
	}
	if c.late == pipelines.LateDeadLetter {
		got := map[int64]int{}
		for _, r := range kafkatest.ConsumeAll(t, brokers, deadLetters) {
			var v struct{ Amount int64 }
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("dead letter %s: %v", r.Value, err)
			}
			if h := header(r, kafka.HeaderError); !strings.HasPrefix(h, "late: table per_window:") {
				t.Fatalf("dead letter %s: error header %q", r.Value, h)
			}
			got[v.Amount]++
		}
		if !maps.Equal(got, m.late) {
			t.Fatalf("seed %d: dead letters of %d records, want the %d late records, each once per late window", c.seed, len(got), len(m.late))
		}
	}
	t.Logf("seed %d: %d windows, %d closed and written once, %d late records", c.seed, len(m.all()), len(want), len(m.late))
}

// exportAll runs e's changelog exporters until stop is called, which waits
// until they exported everything the stopped jobs committed (when caughtUp)
// and stops them.
func exportAll(t *testing.T, e *Env) (stop func(caughtUp bool)) {
	ctx, cancel := context.WithCancel(t.Context())
	exported := make(chan error, 1)
	go func() { exported <- e.RunExporters(ctx) }()
	return func(caughtUp bool) {
		t.Helper()
		defer func() { cancel(); <-exported }()
		for deadline := time.Now().Add(30 * time.Second); caughtUp && !e.ExportsCaughtUp(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the changelog exporters did not catch up")
			}
		}
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestWindowFinalOracle: emit: final with allowed lateness, out-of-order
// and late records, an idle partition, parallelism 2, for both late
// policies.
func TestWindowFinalOracle(t *testing.T) {
	for _, late := range []pipelines.LatePolicy{pipelines.LateDrop, pipelines.LateDeadLetter} {
		t.Run(string(late), func(t *testing.T) {
			runFinalCase(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 5, phases: 5, perPhase: 150,
				size: 10 * time.Second, lateness: 5 * time.Second, bound: 2 * time.Second, late: late})
		})
	}
}

// TestWindowUpdatesLate: emit: updates with late: drop and dead_letter
// consults the watermark too: a record of a closed window is counted and
// dropped or dead-lettered, the others update their window's row at once
// (open windows are in the table).
func TestWindowUpdatesLate(t *testing.T) {
	for _, late := range []pipelines.LatePolicy{pipelines.LateDrop, pipelines.LateDeadLetter} {
		t.Run(string(late), func(t *testing.T) {
			runFinalCase(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 5, phases: 4, perPhase: 150,
				size: 10 * time.Second, lateness: 5 * time.Second, bound: 2 * time.Second, late: late, updates: true})
		})
	}
}

// TestHoppingWindowFinal: hopping windows (10s, one every 2.5s: four per
// record) with emit: final, for both late policies: each of a record's
// windows is held on its own and written once when it closes; a record
// may count in its later windows and be late for its earlier ones, counted
// and dead-lettered once per late window.
func TestHoppingWindowFinal(t *testing.T) {
	for _, late := range []pipelines.LatePolicy{pipelines.LateDrop, pipelines.LateDeadLetter} {
		t.Run(string(late), func(t *testing.T) {
			runFinalCase(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 5, phases: 5, perPhase: 150,
				size: 10 * time.Second, every: 2500 * time.Millisecond, lateness: 5 * time.Second, bound: 2 * time.Second, late: late})
		})
	}
}

// TestHoppingWindowUpdatesLate: hopping windows with emit: updates and
// late: drop: the windows still open take a record at once, the closed
// ones count it late.
func TestHoppingWindowUpdatesLate(t *testing.T) {
	runFinalCase(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 5, phases: 4, perPhase: 150,
		size: 10 * time.Second, every: 5 * time.Second, lateness: 5 * time.Second, bound: 2 * time.Second,
		late: pipelines.LateDrop, updates: true})
}

// TestWindowRetainFinal: emit: final (and, for hopping windows, updates
// with late: drop) with retain, for tumbling, hopping and session windows:
// a window's row is written once when it closes and deleted (-D in the log
// and the changelog) once the sink's watermark passes its end plus retain;
// after every phase the table holds exactly the closed windows not yet
// past retention.
func TestWindowRetainFinal(t *testing.T) {
	base := finalCase{parts: 3, par: 2, keys: 5, phases: 5, perPhase: 100,
		size: 10 * time.Second, lateness: 5 * time.Second, bound: 2 * time.Second, late: pipelines.LateDrop, retain: 8 * time.Second}
	cases := map[string]func(c *finalCase){
		"tumble":      func(*finalCase) {},
		"hop":         func(c *finalCase) { c.every = 5 * time.Second; c.late = pipelines.LateDeadLetter },
		"hop_updates": func(c *finalCase) { c.every = 5 * time.Second; c.updates = true },
		"session": func(c *finalCase) {
			c.size, c.gap, c.lateness, c.bound, c.keys, c.perPhase, c.retain = 0, 2*time.Second, 3*time.Second, time.Second, 8, 40, 4*time.Second
		},
	}
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		t.Run(name, func(t *testing.T) {
			c := base
			c.seed = crashtest.Seed(t, *seedFlag)
			cases[name](&c)
			runFinalCase(t, c)
		})
	}
}

// TestSessionWindowFinal: session windows with emit: final, out-of-order
// and late records, records within the lateness, an idle partition, and
// in every phase a record that bridges two sessions of one user (after
// them in its partition): each session's row is written once when the
// watermark passes its end plus the lateness, with the value of every
// record of the merged session.
func TestSessionWindowFinal(t *testing.T) {
	for _, late := range []pipelines.LatePolicy{pipelines.LateDrop, pipelines.LateDeadLetter} {
		t.Run(string(late), func(t *testing.T) {
			runFinalCase(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 8, phases: 5, perPhase: 40,
				gap: 2 * time.Second, lateness: 3 * time.Second, bound: time.Second, late: late})
		})
	}
}

// TestSessionWindowUpdates: the same with emit: updates: the table holds
// every session as its records arrived, and a merge deletes the rows of
// the sessions it merged (-D), which the committed changelog replays.
func TestSessionWindowUpdates(t *testing.T) {
	runFinalCase(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 8, phases: 5, perPhase: 40,
		gap: 2 * time.Second, lateness: 3 * time.Second, bound: time.Second, late: pipelines.LateDrop, updates: true})
}

// TestSessionWindowProperty runs the session oracle over random cases:
// partitions, parallelism, keys, gap, lateness (0 included), bound and
// emit mode drawn from the seed.
func TestSessionWindowProperty(t *testing.T) {
	seed := crashtest.Seed(t, *seedFlag)
	rng := rand.New(rand.NewSource(seed))
	for i := range 3 {
		c := finalCase{seed: rng.Int63(), parts: 2 + rng.Intn(3), par: 1 + rng.Intn(3), keys: 2 + rng.Intn(10),
			phases: 3 + rng.Intn(3), perPhase: 20 + rng.Intn(60),
			gap:      time.Duration(100+rng.Intn(3000)) * time.Millisecond,
			lateness: time.Duration(rng.Intn(3)) * time.Duration(rng.Intn(3000)) * time.Millisecond,
			bound:    time.Duration(500+rng.Intn(3000)) * time.Millisecond,
			late:     pipelines.LateDrop, updates: rng.Intn(2) == 0}
		t.Run(fmt.Sprint(i), func(t *testing.T) { runFinalCase(t, c) })
	}
}

// TestWindowFinalProperty runs the oracle over random cases: partitions,
// parallelism, keys, window size, tumbling or hopping, lateness (0
// included), bound and retention drawn from the seed.
func TestWindowFinalProperty(t *testing.T) {
	seed := crashtest.Seed(t, *seedFlag)
	rng := rand.New(rand.NewSource(seed))
	for i := range 3 {
		c := finalCase{seed: rng.Int63(), parts: 2 + rng.Intn(3), par: 1 + rng.Intn(3), keys: 1 + rng.Intn(8),
			phases: 3 + rng.Intn(3), perPhase: 20 + rng.Intn(200),
			size:     time.Duration(1+rng.Intn(30)) * time.Second,
			lateness: time.Duration(rng.Intn(3)) * time.Duration(rng.Intn(20)) * time.Second,
			bound:    time.Duration(rng.Intn(5000)) * time.Millisecond,
			late:     pipelines.LateDrop}
		if k := []time.Duration{1, 1, 2, 4, 5}[rng.Intn(5)]; k > 1 {
			c.every = c.size / k // hopping: k windows per record
		}
		if rng.Intn(2) == 0 && c.lateness > 0 {
			// The shortest retention allowed: the closed windows are deleted
			// almost at once, so every case with retention deletes some
			// (TestWindowRetainFinal keeps closed windows a while).
			c.retain = c.lateness
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { runFinalCase(t, c) })
	}
}

// TestWindowFinalRestore: a job with open windows and fired ones is
// killed (its context cancelled: no final checkpoint) after a checkpoint
// taken at a known watermark, while the windows of the next phase fire;
// the job is started again from its data directory. The restore gives
// back the open windows' partials, their timers and the watermark; undo
// takes back the firings past the checkpoint and the replay fires them
// again, at the same watermarks, with the same values: the table, its log
// and the committed changelog equal the model, each window once.
func TestWindowFinalRestore(t *testing.T) {
	runFinalRestore(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 4, phases: 6, perPhase: 150,
		size: 10 * time.Second, lateness: 5 * time.Second, bound: 2 * time.Second, late: pipelines.LateDrop,
		checkpoint: time.Second}) // rare checkpoints: the kill comes between two, after a firing
}

// TestHoppingWindowFinalRestore is TestWindowFinalRestore with hopping
// windows and a retention: each of a record's windows comes back from the
// checkpoint with its partials and timer, the replay fires the same
// windows with the same values, and deletes the same windows.
func TestHoppingWindowFinalRestore(t *testing.T) {
	runFinalRestore(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 4, phases: 6, perPhase: 150,
		size: 10 * time.Second, every: 5 * time.Second, lateness: 5 * time.Second, bound: 2 * time.Second, late: pipelines.LateDrop,
		retain: 20 * time.Second, checkpoint: time.Second})
}

// TestSessionWindowFinalRestore is TestWindowFinalRestore with session
// windows: the open sessions (their bounds and partials) and their timers
// come back from the checkpoint, and the replay merges and fires the same
// sessions with the same values.
func TestSessionWindowFinalRestore(t *testing.T) {
	runFinalRestore(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 8, phases: 6, perPhase: 40,
		gap: 2 * time.Second, lateness: 3 * time.Second, bound: time.Second, late: pipelines.LateDrop,
		checkpoint: time.Second})
}

// TestSessionWindowUpdatesRestore: the same with emit: updates, killed
// while the sessions of a phase are written and merged: undo takes back
// the writes and the deletes of the merges past the checkpoint, the replay
// does them again, and the committed changelog replays to the model.
func TestSessionWindowUpdatesRestore(t *testing.T) {
	runFinalRestore(t, finalCase{seed: crashtest.Seed(t, *seedFlag), parts: 3, par: 2, keys: 8, phases: 6, perPhase: 40,
		gap: 2 * time.Second, lateness: 3 * time.Second, bound: time.Second, late: pipelines.LateDrop,
		checkpoint: time.Second, updates: true})
}

// runFinalRestore runs the restore test of a case.
func runFinalRestore(t *testing.T, c finalCase) {
	const crashAfter = 3 // phases read before the checkpoint the restore starts from
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, c.parts)
	p := load(t, finalJob(c, "final", brokers, topic, ""))
	dir := t.TempDir()
	m := newFinalModel(c)

	e := openEnv(t, Options{DataDir: dir, SyncTableWrites: true}, p)
	stopExport := exportAll(t, e)
	ctx, kill := context.WithCancel(t.Context())
	kafkatest.Produce(t, brokers, m.phase(topic, true)...)
	j, done := startJob(t, ctx, e, p)
	tab, _ := e.Table("per_window")
	for i := range crashAfter {
		if i > 0 {
			kafkatest.Produce(t, brokers, m.phase(topic, false)...)
		}
		waitFinal(t, j, tab, m, c.seed)
	}
	// The next phase that changes the table is the one killed. With a
	// retention, a phase's windows may all close and expire at the same
	// watermark, which leaves the table as it was: such a phase is read
	// to its end first.
	produced := 0
	for {
		// Two checkpoints completed after the watermark got there: the
		// latest one was triggered after it.
		for n := j.Status().Completed + 2; j.Status().Completed < n; time.Sleep(10 * time.Millisecond) {
		}
		was := m.expected()
		kafkatest.Produce(t, brokers, m.phase(topic, false)...)
		produced++
		if !maps.Equal(was, m.expected()) {
			break
		}
		waitFinal(t, j, tab, m, c.seed)
	}
	before := scanWindows(t, tab)
	fired := len(before)
	for deadline := time.Now().Add(30 * time.Second); maps.Equal(scanWindows(t, tab), before); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("seed %d: no window of phase %d fired (or, emit: updates, was written)", c.seed, crashAfter+produced-1)
		}
	}
	kill()
	<-done
	stopExport(false)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d: killed with %d windows in the table, %d before the phase", c.seed, len(scanWindowsOf(t, dir, p)), fired)

	reg := prometheus.NewRegistry()
	e = openEnv(t, Options{DataDir: dir, Registerer: reg}, p)
	defer e.Close()
	stopExport = exportAll(t, e)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	j, done = startJob(t, ctx, e, p)
	if !j.Restoring() {
		t.Fatal("the second run does not restore")
	}
	tab, _ = e.Table("per_window")
	waitFinal(t, j, tab, m, c.seed)
	for range c.phases - crashAfter - produced {
		kafkatest.Produce(t, brokers, m.phase(topic, false)...)
		waitFinal(t, j, tab, m, c.seed)
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatalf("seed %d: run: %v", c.seed, err)
	}
	want := m.closed()
	if d := diffWindows(scanWindows(t, tab), m.expected()); d != "" {
		t.Fatalf("seed %d: the table: %s", c.seed, d)
	}
	stopExport(true)
	if c.updates {
		checkChangelogReplay(t, brokers, topic+"-changelog", m.expected(), c.seed)
	} else {
		checkChangelog(t, brokers, topic+"-changelog", want, m.expired, c.seed)
	}
	undone := int(gaugeSum(t, reg, "ebbflow_sink_undo_keys_restored"))
	if undone == 0 {
		t.Fatalf("seed %d: the restore undid no firing: the kill left nothing past the checkpoint, the test proved little", c.seed)
	}
	t.Logf("seed %d: %d windows, %d closed and written once across the restore, which undid %d", c.seed, len(m.all()), len(want), undone)
}

// scanWindowsOf reads the windowed table of p under dir while no Env has it
// open.
func scanWindowsOf(t *testing.T, dir string, p *pipelines.Pipeline) map[winKey]winAcc {
	t.Helper()
	e := openEnv(t, Options{DataDir: dir}, p)
	defer e.Close()
	tab, _ := e.Table("per_window")
	return scanWindows(t, tab)
}

// TestWindowFinalRestoresTimerCheckpoint: the keyed state of a final
// window's processor as the version before issue #15 checkpointed it, with
// an event-time timer per window (the state "ebbflow.timers") beside the
// partials ("windows"), restores: each window fires once, when the
// watermark reaches its close time, in key order, with its partials, and
// the old timers are deleted from the state.
func TestWindowFinalRestoresTimerCheckpoint(t *testing.T) {
	c := finalCase{par: 1, parts: 1, size: 10 * time.Second, lateness: 5 * time.Second, bound: time.Second, late: pipelines.LateDrop}
	p := load(t, finalJob(c, "final", []string{"127.0.0.1:1"}, "in", ""))
	e := openEnv(t, Options{DataDir: t.TempDir()}, p)
	defer e.Close()
	table, _ := e.Table("per_window")
	pt := p.Tables[0]
	var cols []string
	for _, col := range pt.Columns {
		cols = append(cols, col.Name)
	}
	groups := state.RangeFor(state.DefaultMaxParallelism, 1, 0)
	backend, err := state.NewMemoryFactory().OpenKeyed(state.KeyedSpec{KeyGroups: groups})
	if err != nil {
		t.Fatal(err)
	}
	newKeyed := func() *state.Keyed { return state.NewKeyed(state.KeyedConfig{Backend: backend, KeyGroups: groups}) }

	// The old checkpoint: windows [0, 10s) of u2 and u1, [10s, 20s) of u1.
	type win struct {
		user       string
		start      int64
		total, top int64
	}
	wins := []win{{"u2", 0, 7, 7}, {"u1", 0, 5, 3}, {"u1", 10e9, 4, 4}}
	old := newKeyed()
	proc := newWindowProc(pt, table, cols)
	parts := state.NewValue(old, "windows", state.StringCodec{}, state.Codec[[]agg.Value](partialsCodec{proc.parts.types}))
	timers := state.NewValue(old, "ebbflow.timers", state.StringCodec{}, state.Codec[[]byte](state.BytesCodec{}))
	keyOf := func(w win) string {
		k, err := table.AppendKey(nil, appendBounds([]agg.Value{agg.StringValue(w.user)}, w.start, w.start+int64(c.size)))
		if err != nil {
			t.Fatal(err)
		}
		return string(k)
	}
	closesAt := func(w win) int64 { return w.start + int64(c.size) - 1 + int64(c.lateness) }
	for _, w := range wins {
		// The columns: total (sum), n (count), top (max).
		if err := parts.Put(keyOf(w), []agg.Value{agg.IntValue(w.total), agg.IntValue(2), agg.IntValue(w.top)}); err != nil {
			t.Fatal(err)
		}
		if err := timers.Put(keyOf(w), binary.BigEndian.AppendUint64(nil, uint64(closesAt(w)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Flush(); err != nil {
		t.Fatal(err)
	}

	restored := newKeyed()
	ctx := &runtime.Context{Operator: "per_window-window", Logger: testLogger(), Registerer: prometheus.NewRegistry()}
	if err := proc.Open(ctx, restored); err != nil {
		t.Fatalf("open on the old checkpoint: %v", err)
	}
	var fired []string
	fire := func(wm int64) {
		t.Helper()
		if err := proc.fireUpTo(wm, func(v windowed) {
			fired = append(fired, fmt.Sprintf("%s@%s:%v", v.key[0].Str(), v.key[1].Time().Format("05"), v.vals))
		}); err != nil {
			t.Fatal(err)
		}
	}
	fire(closesAt(wins[0]) - 1)
	if len(fired) != 0 {
		t.Fatalf("fired %v before the windows close", fired)
	}
	fire(closesAt(wins[0]))
	want := fmt.Sprint([]string{"u1@00:[5 2 3]", "u2@00:[7 2 7]"})
	if fmt.Sprint(fired) != want {
		t.Fatalf("at the first close time fired %v, want %s (key order)", fired, want)
	}
	fire(closesAt(wins[2]) + int64(time.Hour))
	fire(closesAt(wins[2]) + 2*int64(time.Hour))
	want = fmt.Sprint([]string{"u1@00:[5 2 3]", "u2@00:[7 2 7]", "u1@10:[4 2 4]"})
	if fmt.Sprint(fired) != want {
		t.Fatalf("fired %v, want %s (each window once)", fired, want)
	}
	if err := restored.Flush(); err != nil {
		t.Fatal(err)
	}
	after := newKeyed()
	for _, name := range []string{"windows", "ebbflow.timers"} {
		n := 0
		if err := state.NewValue(after, name, state.StringCodec{}, state.Codec[[]byte](state.BytesCodec{})).Scan(func(string, []byte) error {
			n++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("state %q holds %d entries after every window fired, want none", name, n)
		}
	}
}
