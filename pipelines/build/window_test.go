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
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	rng := rand.New(rand.NewSource(1))
	base := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	type key struct {
		user       string
		start, end time.Time
	}
	want := map[key]int64{}
	var recs []*kgo.Record
	for i := range 600 {
		user := fmt.Sprintf("u%d", i%5)
		// Mostly forward, some records minutes behind: every one counts in its
		// window in updates mode.
		at := base.Add(time.Duration(i)*time.Second - time.Duration(rng.Intn(4))*time.Minute + time.Duration(rng.Intn(1000))*time.Millisecond)
		start := at.Truncate(time.Minute)
		want[key{user, start, start.Add(time.Minute)}] += int64(i)
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
    columns: {total: {agg: sum, from: amount}}
    window: {tumble: 1m, on: at}
checkpoint: {interval: 50ms}
`, strings.Join(brokers, ","), topic))
	e := openEnv(t, Options{DataDir: t.TempDir()}, p)
	defer e.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	_, done := startJob(t, ctx, e, p)
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	tab, _ := e.Table("per_minute")
	if names := columnsOf(tab.Schema()); names != "user window_start window_end total" {
		t.Fatalf("table columns %s, want user window_start window_end total", names)
	}
	got := map[key]int64{}
	if err := tab.Scan(func(r aggmerge.Row) error {
		got[key{r.Key[0].Str(), r.Key[1].Time(), r.Key[2].Time()}] = r.Values[0].Int()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d (one per user and minute)", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("row %v: total %d, want %d", k, got[k], v)
		}
	}
}
