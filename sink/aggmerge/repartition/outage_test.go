package repartition

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
)

// TestRunRidesOutBrokerOutage stops the broker under a running stage 1
// (Run) and starts it again: stage 1 does not end, its Status says what
// fails and the failures are counted meanwhile, it is healthy again after
// the broker is back, and every input record, before, during and after
// the outage, is read from the repartition topic exactly once.
func TestRunRidesOutBrokerOutage(t *testing.T) {
	opts := embedded.Options{Port: kafkatest.FreePort(t), DataDir: t.TempDir()}
	b, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	h := hop{brokers: b.Addrs(), input: "outage-input", topic: "outage-repartition", group: "outage-group", txnID: "outage-txn"}
	kafkatest.CreateTopic(t, h.brokers, h.input, hopInputParts)
	kafkatest.CreateTopic(t, h.brokers, h.topic, hopPartitions)
	h.produceInput(t, 0, 100)

	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	st := NewStatus()
	cfg := WriterConfig{Kafka: kafka.Connection{Brokers: h.brokers}, Group: h.group, Input: []string{h.input}, Topic: h.topic,
		Partitions: hopPartitions, Buckets: hopBuckets, TransactionalID: h.txnID, InstanceID: "outage-0", Metrics: m, Status: st}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, 50*time.Millisecond, func(r *kgo.Record, send func(key, value []byte)) error {
			send(r.Value, append([]byte("r:"), r.Value...))
			return nil
		})
	}()
	start := time.Now()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		defer func() { t.Logf("%s: %s", time.Since(start).Round(time.Millisecond), what) }()
		for deadline := time.Now().Add(2 * kafkatest.Timeout); !cond(); time.Sleep(20 * time.Millisecond) {
			select {
			case err := <-done:
				t.Fatalf("stage 1 ended while waiting for %s: %v", what, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	readN := func(n int) func() bool {
		return func() bool { return len(h.read(t)) >= n }
	}
	waitFor("the first 100 rows", readN(100))
	waitFor("the input partitions assigned", func() bool { return len(st.Assigned()[h.input]) == hopInputParts })

	b.Close()
	waitFor("stage 1 to report the outage", func() bool { ok, _ := st.Health(); return !ok })
	_, msg := st.Health()
	t.Logf("unhealthy: %s", msg)
	waitFor("two failures counted", func() bool { return failures(m) >= 2 })
	if b, err = embedded.Start(opts); err != nil {
		t.Fatalf("restart the broker: %v", err)
	}
	h.produceInput(t, 100, 200)
	waitFor("the 200 rows", readN(200))
	waitFor("stage 1 to recover", func() bool { ok, _ := st.Health(); return ok })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stage 1 stopped with %v", err)
	}
	wantExactly(t, h.readSettled(t), func(seq int) string { return "r:" + strconv.Itoa(seq) }, 200)
}

func failures(m *Metrics) float64 {
	var d dto.Metric
	if err := m.failures.Write(&d); err != nil {
		return 0
	}
	return d.GetCounter().GetValue()
}
