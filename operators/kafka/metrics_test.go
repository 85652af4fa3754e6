package kafka_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// TestMetrics reads a topic to its end and checks the counters against
// what was produced, and that the lag per partition fell to zero.
func TestMetrics(t *testing.T) {
	const partitions, n = 3, 600
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, partitions)
	recs := eventRecords(topic, partitions, 0, n, testKeys)
	bytes := 0
	for _, r := range recs {
		bytes += len(r.Key) + len(r.Value)
	}
	kafkatest.Produce(t, brokers, recs...)
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	j := eventJob(t, dir, newSource(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}, eventFormat), 2, 0,
		func(o *runtime.Options) { o.Registerer = reg })
	var read, readBytes float64
	lag := map[string]float64{}
	check := func() {
		// Metrics go away with the job: look while it runs.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			read = counter(t, reg, "ebbflow_source_records_read_total", "operator", "kafka")
			readBytes = counter(t, reg, "ebbflow_source_bytes_read_total", "operator", "kafka")
			lag = gauges(t, reg, "ebbflow_source_lag_records", "partition")
			if read == n && len(lag) == partitions {
				return
			}
		}
	}
	checkSeqs(t, runUntilCommitted(t, j, filepath.Join(dir, "out"), n, check), n)
	if read != n || readBytes != float64(bytes) {
		t.Errorf("records read %v (want %d), bytes %v (want %d)", read, n, readBytes, bytes)
	}
	if len(lag) != partitions {
		t.Errorf("lag of %d partitions, want %d: %v", len(lag), partitions, lag)
	}
	for p, l := range lag {
		if l != 0 {
			t.Errorf("partition %s: lag %v after reading everything", p, l)
		}
	}
}

// gauges returns the gauges called name by the value of label.
func gauges(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}
