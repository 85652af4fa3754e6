package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
)

// The final-window crash harness. Every record is on time for its
// partition or behind its watermark within the allowed lateness, so it
// counts wherever the watermark falls, across kills, restores and replays;
// a window fires only once every record of it was read. So every row the
// table ever holds is a closed window with its exact final value, and the
// watermark can never have passed a window the input does not close: the
// least over the partitions of their largest event time, less the bound.

const (
	finalSize     = 10 * time.Second
	finalLateness = 5 * time.Second
	finalBound    = 2 * time.Second
)

type finalWindow struct {
	user       string
	start, end int64 // ns since the epoch
}

type finalValue struct{ total, orders, top int64 }

// finalInput makes the records and keeps the exact answer.
type finalInput struct {
	t       *testing.T
	rng     *rand.Rand
	brokers []string
	topic   string
	clock   [3]time.Time // per partition: its largest event time
	seq     int64
	gap     time.Duration              // session windows with this gap, not windows of finalSize
	every   time.Duration              // hopping windows of finalSize starting every this (0: tumbling)
	windows map[finalWindow]finalValue // tumbling or hopping
	events  map[string][]finalEvent    // sessions: per user, every record
}

// finalEvent is a record of a session window's input.
type finalEvent struct{ at, amount int64 }

// closesAt is TableWindow.ClosesAt of the job's window ending at end.
func closesAt(end int64) int64 {
	return end - 1 + int64(finalLateness)
}

// all returns every window of the input: the tumbling windows, or the
// sessions of each user's records sorted by time (split where two are a
// gap or more apart).
func (in *finalInput) all() map[finalWindow]finalValue {
	if in.gap == 0 {
		return in.windows
	}
	out := map[finalWindow]finalValue{}
	for user, evs := range in.events {
		evs = slices.SortedFunc(slices.Values(evs), func(a, b finalEvent) int { return cmp.Compare(a.at, b.at) })
		var k finalWindow
		var v finalValue
		for i, e := range evs {
			if i > 0 && e.at-evs[i-1].at >= int64(in.gap) {
				out[k] = v
				v = finalValue{}
			}
			if v.orders == 0 {
				k.user, k.start = user, e.at
			}
			k.end = e.at + int64(in.gap)
			v = finalValue{v.total + e.amount, v.orders + 1, max(v.top, e.amount)}
		}
		out[k] = v
	}
	return out
}

// produce writes n records, each to a random partition, whose event time
// moves that partition's clock on and is at most the bound behind it, or
// (one in eight) behind its watermark within half the allowed lateness.
func (in *finalInput) produce(n int) {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		p := in.rng.Intn(len(in.clock))
		in.clock[p] = in.clock[p].Add(time.Duration(in.rng.Intn(200)) * time.Millisecond)
		behind := time.Duration(in.rng.Int63n(int64(finalBound)))
		if in.rng.Intn(8) == 0 {
			behind = finalBound + time.Duration(in.rng.Int63n(int64(finalLateness/2)))
		}
		at := in.clock[p].Add(-behind).Truncate(time.Millisecond)
		in.add(&recs[i], p, at)
	}
	kafkatest.Produce(in.t, in.brokers, recs...)
}

// add makes the record of partition p at event time at.
func (in *finalInput) add(rec **kgo.Record, p int, at time.Time) {
	user := fmt.Sprintf("u%02d", in.rng.Intn(20))
	in.seq++
	amount := in.seq%997 + 1
	if in.gap > 0 {
		in.events[user] = append(in.events[user], finalEvent{at.UnixNano(), amount})
	} else {
		// The windows of finalSize that hold at: one starting every
		// `every` (finalSize when tumbling), the last one at or before at.
		every := cmp.Or(in.every, finalSize)
		last := at.UnixNano() - at.UnixNano()%int64(every)
		for start := last; start > at.UnixNano()-int64(finalSize); start -= int64(every) {
			k := finalWindow{user, start, start + int64(finalSize)}
			w := in.windows[k]
			in.windows[k] = finalValue{w.total + amount, w.orders + 1, max(w.top, amount)}
		}
	}
	v, _ := json.Marshal(map[string]any{"seq": in.seq, "user": user, "amount": amount, "at": at.Format(time.RFC3339Nano)})
	*rec = &kgo.Record{Topic: in.topic, Partition: int32(p), Value: v}
}

// end moves every partition's event time an hour on: every window of the
// input so far closes.
func (in *finalInput) end() {
	recs := make([]*kgo.Record, len(in.clock))
	for p := range in.clock {
		in.clock[p] = in.clock[p].Add(time.Hour)
		in.add(&recs[p], p, in.clock[p])
	}
	kafkatest.Produce(in.t, in.brokers, recs...)
}

// highest is the most the watermark can be: the least of the partitions'
// largest event times, less the bound.
func (in *finalInput) highest() int64 {
	least := slices.MinFunc(in.clock[:], func(a, b time.Time) int { return a.Compare(b) })
	return least.UnixNano() - int64(finalBound) - 1
}

// closed returns the windows closed at the highest watermark.
func (in *finalInput) closed() map[finalWindow]finalValue {
	out := map[finalWindow]finalValue{}
	for k, v := range in.all() {
		if closesAt(k.end) <= in.highest() {
			out[k] = v
		}
	}
	return out
}

// scanFinal reads the table with "table scan -o json"; size is the
// windows' length (0: sessions).
func scanFinal(t *testing.T, dir string, size time.Duration) map[finalWindow]finalValue {
	t.Helper()
	out, code := runCLI(t, nil, "table", "scan", "--data-dir", dir, "--table", "per_window", "-o", "json")
	if code != 0 {
		t.Fatalf("table scan: exit %d", code)
	}
	got := map[finalWindow]finalValue{}
	for line := range strings.Lines(out) {
		var r struct {
			User               string
			WindowStart        time.Time `json:"window_start"`
			WindowEnd          time.Time `json:"window_end"`
			Total, Orders, Top int64
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("row %q: %v", line, err)
		}
		if size > 0 && r.WindowEnd.Sub(r.WindowStart) != size {
			t.Fatalf("row %q: not a window of %s", line, size)
		}
		got[finalWindow{r.User, r.WindowStart.UnixNano(), r.WindowEnd.UnixNano()}] = finalValue{r.Total, r.Orders, r.Top}
	}
	return got
}

// diffFinal describes how the rows differ from the closed windows want:
// a row of a window the input cannot have closed yet is early, a row with
// another value is wrong; with all, a closed window missing too ("": none).
func diffFinal(got, want, every map[finalWindow]finalValue, all bool) string {
	var d []string
	at := func(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }
	for _, k := range slices.SortedFunc(maps.Keys(got), cmpFinal) {
		switch w, ok := want[k]; {
		case !ok && every[k] != (finalValue{}):
			d = append(d, fmt.Sprintf("window %s %s-%s written early (it closes at %s)", k.user, at(k.start), at(k.end), at(closesAt(k.end))))
		case !ok:
			d = append(d, fmt.Sprintf("window %s %s-%s is not in the input", k.user, at(k.start), at(k.end)))
		case got[k] != w:
			d = append(d, fmt.Sprintf("window %s %s-%s: %+v, want %+v", k.user, at(k.start), at(k.end), got[k], w))
		}
	}
	if all {
		for _, k := range slices.SortedFunc(maps.Keys(want), cmpFinal) {
			if _, ok := got[k]; !ok {
				d = append(d, fmt.Sprintf("window %s %s-%s missing", k.user, at(k.start), at(k.end)))
			}
		}
	}
	if len(d) > 4 {
		d = append(d[:4], fmt.Sprintf("and %d more", len(d)-4))
	}
	return strings.Join(d, "; ")
}

func cmpFinal(a, b finalWindow) int {
	return cmp.Or(cmp.Compare(a.start, b.start), strings.Compare(a.user, b.user))
}

// TestAbuseWindowFinalSIGKILL runs a job with an emit: final table from
// YAML against Kafka, kills the runner with SIGKILL at seeded random
// moments while input keeps arriving and windows keep closing, restarts
// it each time, then ends event time and stops it gracefully. After every
// kill the table (writes past the checkpoint included, which the next
// start undoes) holds only closed windows, each with its exact final
// value: never early. At the end the table holds every closed window, and
// the committed changelog (debezium-json, read_committed) one creation
// per window and key with its final value, nothing else.
func TestAbuseWindowFinalSIGKILL(t *testing.T) {
	runAbuseFinal(t, "testdata/final_windows.yaml", finalShape{})
}

// TestAbuseHopFinalSIGKILL is the same harness with hopping windows
// (testdata/final_hops.yaml: 10s every 5s, so each record counts in two
// windows, which close at different watermarks): after every kill only
// closed windows with their exact values, at the end every window once in
// the table and the committed changelog.
func TestAbuseHopFinalSIGKILL(t *testing.T) {
	runAbuseFinal(t, "testdata/final_hops.yaml", finalShape{every: 5 * time.Second})
}

// TestAbuseSessionFinalSIGKILL is the same harness with session windows
// (testdata/final_sessions.yaml: a gap of 1s, so users' sessions hold a
// few records each and records arriving out of order merge them): after
// every kill only closed sessions with their exact values, at the end
// every session once in the table and the committed changelog.
func TestAbuseSessionFinalSIGKILL(t *testing.T) {
	runAbuseFinal(t, "testdata/final_sessions.yaml", finalShape{gap: time.Second})
}

// TestAbuseRetainFinalSIGKILL is the harness with tumbling windows that
// are deleted 20s of event time after they end (testdata/final_retain.yaml):
// after every kill only closed windows with their exact values; at the end
// (event time an hour on) none left in the table, and in the committed
// changelog each window's creation with its final value, then its deletion,
// once each.
func TestAbuseRetainFinalSIGKILL(t *testing.T) {
	runAbuseFinal(t, "testdata/final_retain.yaml", finalShape{retain: 20 * time.Second})
}

// finalShape is the windows of a harness job file: sessions with gap, or
// windows of finalSize starting every `every` (0: tumbling); with retain,
// deleted once the watermark passes their end plus retain.
type finalShape struct{ gap, every, retain time.Duration }

// expired reports whether the window is deleted at the highest watermark.
func (s finalShape) expired(in *finalInput, k finalWindow) bool {
	return s.retain > 0 && k.end+int64(s.retain) <= in.highest()
}

// runAbuseFinal runs the harness on job file, whose windows have shape.
func runAbuseFinal(t *testing.T, file string, shape finalShape) {
	size := finalSize
	if shape.gap > 0 {
		size = 0
	}
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	brokers := kafkatest.Brokers(t)
	in := &finalInput{t: t, rng: rand.New(rand.NewSource(seed)), brokers: brokers,
		topic: kafkatest.NewTopic(t, brokers, 3), gap: shape.gap, every: shape.every, windows: map[finalWindow]finalValue{}, events: map[string][]finalEvent{}}
	for p := range in.clock {
		in.clock[p] = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	}
	changelog := kafkatest.TopicName(t, brokers)
	dir := t.TempDir()
	args := []string{"run", "-f", file, "--data-dir", dir, "--http-address", "127.0.0.1:0", "--summary", "0"}
	env := []string{syncWritesEnv + "=1", "KAFKA_BROKERS=" + strings.Join(brokers, ","), "ORDERS_TOPIC=" + in.topic, "CHANGELOG_TOPIC=" + changelog}
	undone := 0
	for k := range *killsFlag {
		in.produce(200 + in.rng.Intn(500))
		c, wait := runKilled(t, in.rng, in.produce, env, args)
		undone += undoneKeys(c)
		got := scanFinal(t, dir, size)
		if d := diffFinal(got, in.closed(), in.all(), false); d != "" {
			t.Fatalf("seed %d: after kill %d: %s", seed, k+1, d)
		}
		t.Logf("kill %d after %s: %d windows in the table, %d closed by the input, %d open (the undo at that run's start restored %d keys)",
			k+1, wait, len(got), len(in.closed()), len(in.all())-len(in.closed()), undoneKeys(c))
	}
	in.end()
	want := in.closed() // every window the changelog creates
	kept := maps.Clone(want)
	maps.DeleteFunc(kept, func(k finalWindow, _ finalValue) bool { return shape.expired(in, k) })
	c := start(t, env, args...)
	diff := "not started"
	waitFor(t, c, 60*time.Second, fmt.Sprintf("every closed window in the table, or deleted (seed %d)", seed), func() bool {
		if liveRunner(dir) == "" {
			return false
		}
		if diff = diffFinal(scanFinal(t, dir, size), kept, in.all(), true); diff != "" {
			return false
		}
		_, deleted := finalChangelog(t, seed, kafkatest.ConsumeAll(t, brokers, changelog))
		diff = fmt.Sprintf("%d windows deleted in the committed changelog, want %d", deleted, len(want)-len(kept))
		return deleted == len(want)-len(kept)
	})
	stopGracefully(t, c)
	if undone += undoneKeys(c); undone == 0 { // the last run's start undid the last kill's
		t.Fatalf("seed %d: %d kills, and no undo restored a key: the kills left nothing past the checkpoints, so the test proved little", seed, *killsFlag)
	}
	if d := diffFinal(scanFinal(t, dir, size), kept, in.all(), true); d != "" {
		t.Fatalf("seed %d: %s", seed, d)
	}
	created, deleted := finalChangelog(t, seed, kafkatest.ConsumeStable(t, brokers, changelog))
	if d := diffFinal(created, want, in.all(), true); d != "" {
		t.Fatalf("seed %d: the committed changelog: %s", seed, d)
	}
	if deleted != len(want)-len(kept) {
		t.Fatalf("seed %d: the committed changelog deletes %d windows, want %d", seed, deleted, len(want)-len(kept))
	}
	t.Logf("seed %d: %d windows final, each once in the table (%d deleted since) and the changelog; undo restored %d keys over the runs",
		seed, len(want), deleted, undone)
}

// finalChangelog reads a final table's committed changelog (debezium-json):
// each window's creation, with its final value, and at most once after it
// its deletion, with that value as its before-image, and the deletion's
// tombstone; anything else fails the test. It returns the windows created and how many were deleted.
func finalChangelog(t *testing.T, seed int64, recs []*kgo.Record) (created map[finalWindow]finalValue, deleted int) {
	t.Helper()
	created, gone, buried := map[finalWindow]finalValue{}, map[finalWindow]bool{}, map[finalWindow]bool{}
	for _, r := range recs {
		var key struct {
			User        string    `json:"user"`
			WindowStart time.Time `json:"window_start"`
			WindowEnd   time.Time `json:"window_end"`
		}
		var v struct {
			Op     string          `json:"op"`
			Before json.RawMessage `json:"before"`
			After  json.RawMessage `json:"after"`
		}
		if json.Unmarshal(r.Key, &key) != nil {
			t.Fatalf("seed %d: changelog record key %s: not debezium-json", seed, r.Key)
		}
		k := finalWindow{key.User, key.WindowStart.UnixNano(), key.WindowEnd.UnixNano()}
		if r.Value == nil && gone[k] && !buried[k] { // the tombstone after a deletion
			buried[k] = true
			continue
		}
		if json.Unmarshal(r.Value, &v) != nil {
			t.Fatalf("seed %d: changelog record %s = %s: not debezium-json", seed, r.Key, r.Value)
		}
		value := func(raw json.RawMessage) finalValue {
			var row struct{ Total, Orders, Top int64 }
			if json.Unmarshal(raw, &row) != nil {
				t.Fatalf("seed %d: changelog record %s = %s: a row %s", seed, r.Key, r.Value, raw)
			}
			return finalValue{row.Total, row.Orders, row.Top}
		}
		switch _, made := created[k]; {
		case v.Op == "c" && string(v.Before) == "null" && !made:
			created[k] = value(v.After)
		case v.Op == "d" && made && !gone[k] && string(v.After) == "null" && value(v.Before) == created[k]:
			gone[k] = true
			deleted++
		default:
			t.Fatalf("seed %d: changelog record %s = %s: not the creation of a new window, nor the deletion of a created one", seed, r.Key, r.Value)
		}
	}
	return created, deleted
}
