package build

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// TestBoundedKafkaJob: a job file with bounded: true reads its topic (3
// partitions, one empty) to the end and ends by itself, with the exact
// table.
func TestBoundedKafkaJob(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	want := map[string]int64{}
	var recs []*kgo.Record
	for i := range 200 {
		user := fmt.Sprintf("u%d", i%7)
		want[user] += int64(i)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: fmt.Appendf(nil, `{"user":%q,"amount":%d}`, user, i)})
	}
	kafkatest.Produce(t, brokers, recs...)
	p := load(t, fmt.Sprintf(`
job: {name: bounded, parallelism: 2}
source:
  kafka: {brokers: [%s], topics: [%s], bounded: true, schema: {user: string, amount: int64}}
sink:
  table: {name: sums, primary_key: [user], buckets: 2, columns: {total: {agg: sum, from: amount}}}
checkpoint: {interval: 50ms}
`, strings.Join(brokers, ","), topic))
	e := openEnv(t, Options{DataDir: t.TempDir()}, p)
	defer e.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	_, done := startJob(t, ctx, e, p)
	if err := <-done; err != nil {
		t.Fatalf("run: %v, want the bounded job to end by itself", err)
	}
	tab, _ := e.Table("sums")
	got := map[string]int64{}
	if err := tab.Scan(func(r aggmerge.Row) error {
		got[r.Key[0].Str()] = r.Values[0].Int()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table %v, want %v", got, want)
	}
}
