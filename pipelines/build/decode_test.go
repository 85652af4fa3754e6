package build

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// TestBadJSONSkipped: under format json, a record nested deeper than 64
// levels (in a member the schema does not even name) and one with invalid
// UTF-8 in its primary key are bad records: on_error: skip drops and counts
// them, and the table holds only the good ones.
func TestBadJSONSkipped(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	deep := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
	kafkatest.Produce(t, brokers,
		&kgo.Record{Topic: topic, Value: []byte(`{"user":"u1","amount":5}`)},
		&kgo.Record{Topic: topic, Value: []byte(`{"user":"u1","amount":100,"n":` + deep + `}`)},
		&kgo.Record{Topic: topic, Value: []byte("{\"user\":\"u\xff\",\"amount\":7}")},
		&kgo.Record{Topic: topic, Value: []byte(`{"user":"u2","amount":3}`)})
	p := load(t, fmt.Sprintf(`
job: {name: bad-json}
source:
  kafka: {brokers: [%s], topics: [%s], on_error: skip, schema: {user: string, amount: int64}}
sink:
  table: {name: sums, primary_key: [user], buckets: 2, columns: {total: {agg: sum, from: amount}}}
checkpoint: {interval: 50ms}
`, strings.Join(brokers, ","), topic))
	reg := prometheus.NewRegistry()
	e := openEnv(t, Options{DataDir: t.TempDir(), Registerer: reg}, p)
	defer e.Close()
	j, done := startJob(t, context.Background(), e, p)
	const metric = "ebbflow_source_records_dropped_total"
	for deadline := time.Now().Add(30 * time.Second); dropped(t, reg, metric) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			j.Stop()
			t.Fatalf("%v records counted as dropped, want 2", dropped(t, reg, metric))
		}
	}
	tab, _ := e.Table("sums")
	rows := map[string]int64{}
	// one partition, read in order: the last record in, all are
	for deadline := time.Now().Add(30 * time.Second); rows["u2"] == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		clear(rows)
		_ = tab.Scan(func(r aggmerge.Row) error {
			rows[r.Key[0].Str()] = r.Values[0].Int()
			return nil
		})
	}
	n := dropped(t, reg, metric)
	j.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rows) != "map[u1:5 u2:3]" || n != 2 {
		t.Fatalf("table %v and %v dropped, want map[u1:5 u2:3] and 2", rows, n)
	}
}
