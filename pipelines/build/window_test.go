package build

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// TestTumblingWindowUpdates: a table with window: {tumble: 1m, on: at}
// keeps one row per key and window, window_start and window_end as its
// last key columns; out-of-order records update their own window's row.
// The table equals a plain model of the input.
func TestTumblingWindowUpdates(t *testing.T) {
	windowOracle(t, "{tumble: 1m, on: at}", time.Minute, func(at time.Time) []time.Time {
		return []time.Time{at.Truncate(time.Minute)}
	})
}

// TestHoppingWindowUpdates: window: {hop: 1m, every: 20s} puts every record
// in the three windows of a minute starting every 20 seconds that hold it
// (the model tries every start near it); each is a row with its own sum,
// count, max and min.
func TestHoppingWindowUpdates(t *testing.T) {
	windowOracle(t, "{hop: 1m, every: 20s, on: at}", time.Minute, func(at time.Time) []time.Time {
		var starts []time.Time
		for s := at.Truncate(time.Hour).Add(-time.Hour); s.Before(at.Add(time.Hour)); s = s.Add(20 * time.Second) {
			if !s.After(at) && at.Before(s.Add(time.Minute)) {
				starts = append(starts, s)
			}
		}
		return starts
	})
}

// windowOracle runs a job of 600 out-of-order records (some minutes behind)
// into a table with the given window and checks every row against the
// model: startsOf gives the window starts of an event time, each window
// lasting size.
func windowOracle(t *testing.T, window string, size time.Duration, startsOf func(time.Time) []time.Time) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	rng := rand.New(rand.NewSource(1))
	base := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	type key struct {
		user       string
		start, end time.Time
	}
	type agg struct{ total, n, hi, lo int64 }
	want := map[key]agg{}
	var recs []*kgo.Record
	for i := range 600 {
		user := fmt.Sprintf("u%d", i%5)
		// Mostly forward, some records minutes behind: every one counts in its
		// windows in updates mode.
		at := base.Add(time.Duration(i)*time.Second - time.Duration(rng.Intn(4))*time.Minute + time.Duration(rng.Intn(1000))*time.Millisecond)
		for _, start := range startsOf(at) {
			k := key{user, start, start.Add(size)}
			a, seen := want[k]
			if !seen {
				a.hi, a.lo = int64(i), int64(i)
			}
			want[k] = agg{a.total + int64(i), a.n + 1, max(a.hi, int64(i)), min(a.lo, int64(i))}
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 3),
			Value: fmt.Appendf(nil, `{"user":%q,"amount":%d,"at":%q}`, user, i, at.Format(time.RFC3339Nano))})
	}
	kafkatest.Produce(t, brokers, recs...)
	p := load(t, fmt.Sprintf(`
job: {name: windowed, parallelism: 2}
source:
  kafka: {brokers: [%s], topics: [%s], bounded: true, schema: {user: string, amount: int64, at: timestamp}}
sink:
  table:
    name: per_minute
    primary_key: [user]
    buckets: 4
    columns: {total: {agg: sum, from: amount}, n: {agg: count}, hi: {agg: max, from: amount}, lo: {agg: min, from: amount}}
    window: %s
checkpoint: {interval: 50ms}
`, strings.Join(brokers, ","), topic, window))
	e := openEnv(t, Options{DataDir: t.TempDir()}, p)
	defer e.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	_, done := startJob(t, ctx, e, p)
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	tab, _ := e.Table("per_minute")
	if names := columnsOf(tab.Schema()); names != "user window_start window_end total n hi lo" {
		t.Fatalf("table columns %s, want user window_start window_end total n hi lo", names)
	}
	got := map[key]agg{}
	if err := tab.Scan(func(r aggmerge.Row) error {
		v := r.Values
		got[key{r.Key[0].Str(), r.Key[1].Time(), r.Key[2].Time()}] = agg{v[0].Int(), v[1].Int(), v[2].Int(), v[3].Int()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d (one per user and window)", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("row %v: %+v, want %+v", k, got[k], v)
		}
	}
}

// TestWindowRetention: window: {tumble: 1m, on: at, retain: 2m} through
// Kafka with event time: as the watermark (one partition: its largest
// event time) passes a window's end plus two minutes, the window's rows
// leave the table; the rest stay exact.
func TestWindowRetention(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	base := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	type key struct {
		user  string
		start time.Time
	}
	all := map[key]int64{}
	var recs []*kgo.Record
	var last time.Time
	for i := range 600 { // ten minutes
		user := fmt.Sprintf("u%d", i%3)
		at := base.Add(time.Duration(i) * time.Second)
		all[key{user, at.Truncate(time.Minute)}] += int64(i)
		last = at
		recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, `{"user":%q,"amount":%d,"at":%q}`, user, i, at.Format(time.RFC3339Nano))})
	}
	kafkatest.Produce(t, brokers, recs...)
	wm := last.Add(-time.Nanosecond) // the partition's watermark once all is read
	want := map[key]int64{}
	for k, v := range all {
		if k.start.Add(time.Minute + 2*time.Minute).After(wm) {
			want[k] = v
		}
	}
	if len(want) == len(all) || len(want) == 0 {
		t.Fatalf("retention keeps %d of %d rows: the test needs some of both", len(want), len(all))
	}
	p := load(t, fmt.Sprintf(`
job: {name: retained, parallelism: 2}
source:
  kafka:
    brokers: [%s]
    topics: [%s]
    schema: {user: string, amount: int64, at: timestamp}
    event_time: {field: at}
sink:
  table:
    name: recent
    primary_key: [user]
    buckets: 4
    columns: {total: {agg: sum, from: amount}}
    window: {tumble: 1m, on: at, retain: 2m}
checkpoint: {interval: 50ms}
`, strings.Join(brokers, ","), topic))
	e := openEnv(t, Options{DataDir: t.TempDir()}, p)
	defer e.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	j, done := startJob(t, ctx, e, p)
	tab, _ := e.Table("recent")
	rows := func() map[key]int64 {
		got := map[key]int64{}
		_ = tab.Scan(func(r aggmerge.Row) error {
			got[key{r.Key[0].Str(), r.Key[1].Time()}] = r.Values[0].Int()
			return nil
		})
		return got
	}
	same := func(got map[key]int64) bool {
		if len(got) != len(want) {
			return false
		}
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for !same(rows()) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := rows(); !same(got) {
		t.Fatalf("%d rows, want the %d of windows ending after %s minus 2m: %v", len(got), len(want), wm, got)
	}
}
