package build

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime/watermark"
)

// TestEventTimeFromField: a job file's event_time takes each record's event
// time from its field (Unix milliseconds here): each source subtask (one
// partition each) has its partition's watermark, and the table's subtasks
// the least of them.
func TestEventTimeFromField(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 2)
	rec := func(p int32, user string, atMS int64) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, `{"user":%q,"amount":1,"at":%d}`, user, atMS)}
	}
	kafkatest.Produce(t, brokers, rec(0, "a", 10_000), rec(0, "b", 20_000), rec(1, "c", 15_000), rec(1, "a", 12_000))
	p := load(t, fmt.Sprintf(`
job: {name: evt, parallelism: 2}
source:
  kafka:
    brokers: [%s]
    topics: [%s]
    schema: {user: string, amount: int64, at: int64}
    event_time: {field: at, max_out_of_orderness: 2s, idle_timeout: 1m}
sink:
  table: {name: sums, primary_key: [user], buckets: 2, columns: {total: {agg: sum, from: amount}}}
checkpoint: {interval: 50ms}
`, strings.Join(brokers, ","), topic))
	e := openEnv(t, Options{DataDir: t.TempDir()}, p)
	defer e.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	j, done := startJob(t, ctx, e, p)
	bound := int64(2 * time.Second)
	perPartition := []int64{int64(20*time.Second) - bound - 1, int64(15*time.Second) - bound - 1} // its largest, less the bound
	want := []int64{watermark.Max, watermark.Max}                                                 // per source subtask: the least of its partitions
	for part, w := range perPartition {
		sub := kafka.SubtaskFor(topic, int32(part), 2)
		want[sub] = min(want[sub], w)
	}
	for sub := range want {
		if want[sub] == watermark.Max {
			want[sub] = watermark.Min // no partition: idle, no watermark
		}
	}
	least := perPartition[1]
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := j.Status()
		ok := len(st.Tasks) > 0
		for _, ts := range st.Tasks {
			w := least // downstream
			if ts.Source {
				w = want[ts.Subtask]
			}
			ok = ok && watermark.FromTime(ts.Watermark) == w
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks did not reach the watermarks %s (sources) and %s (table): %+v", watermark.Format(want[0]), watermark.Format(least), st.Tasks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestEventTimeOfField(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    any
		want int64
		err  string
	}{
		{v: at, want: at.UnixNano()},
		{v: int64(1500), want: 1_500_000_000},
		{v: nil, err: "field ts is null"},
		{v: "soon", err: "field ts holds a string, not a time"},
	} {
		got, err := eventTimeOf(c.v, "ts")
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("eventTimeOf(%v) = %v, want error %q", c.v, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("eventTimeOf(%v) = %d, %v; want %d", c.v, got, err, c.want)
		}
	}
}
