package kafka_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// badAt produces seqs [0, n) to one partition, with garbage instead of the
// record at offset bad.
func badAt(t *testing.T, brokers []string, topic string, n, bad uint64) {
	recs := eventRecords(topic, 1, 0, n, testKeys)
	recs[bad].Value = []byte("not json {")
	recs[bad].Headers = []kgo.RecordHeader{{Key: "origin", Value: []byte("test")}}
	kafkatest.Produce(t, brokers, recs...)
}

func TestDecodeErrorFails(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	badAt(t, brokers, topic, 20, 10)
	dir := t.TempDir()
	j := eventJob(t, dir, newSource(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}, eventFormat), 1, 0)
	err := j.Run(t.Context())
	if !errors.Is(err, kafka.ErrDecode) {
		t.Fatalf("run: %v, want ErrDecode", err)
	}
	if want := fmt.Sprintf("topic %q partition 0 offset 10", topic); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %s", err, want)
	}
}

func TestDecodeErrorSkips(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	badAt(t, brokers, topic, 20, 10)
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	src := newSource(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, OnDecodeError: kafka.Skip}, eventFormat)
	j := eventJob(t, dir, src, 1, 0, func(o *runtime.Options) { o.Registerer = reg })
	dropped := -1.0
	got := runUntilCommitted(t, j, filepath.Join(dir, "out"), 19, func() {
		// The job unregisters its metrics when it ends: look while it runs.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && dropped != 1; time.Sleep(10 * time.Millisecond) {
			dropped = counter(t, reg, "ebbflow_source_records_dropped_total", "reason", "decode_error")
		}
	})
	checkExactly(t, got, 20, func(seq uint64) bool { return seq != 10 })
	if dropped != 1 {
		t.Fatalf("ebbflow_source_records_dropped_total{reason=decode_error} = %v, want 1", dropped)
	}
}

// counter returns the sum of the counters called name with the label, or -1.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := -1.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum = max(sum, 0) + m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestDecodeErrorDeadLetter: the dead-letter topic does not exist; the
// source creates it when it opens, and the bad record lands there with its
// origin and the error in headers, counted in the metric.
func TestDecodeErrorDeadLetter(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	dlq := kafkatest.TopicName(t, brokers)
	badAt(t, brokers, topic, 20, 10)
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	src := newSource(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, OnDecodeError: kafka.DeadLetter, DeadLetterTopic: dlq}, eventFormat)
	j := eventJob(t, dir, src, 1, 0, func(o *runtime.Options) { o.Registerer = reg })
	counted := -1.0
	got := runUntilCommitted(t, j, filepath.Join(dir, "out"), 19, func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && counted != 1; time.Sleep(10 * time.Millisecond) {
			counted = counter(t, reg, "ebbflow_source_records_dead_lettered_total", "operator", "kafka")
		}
	})
	checkExactly(t, got, 20, func(seq uint64) bool { return seq != 10 })
	if counted != 1 {
		t.Fatalf("ebbflow_source_records_dead_lettered_total = %v, want 1", counted)
	}

	// The checkpoint that covered the bad record completed, so its dead
	// letter is there.
	dead := kafkatest.ConsumeAll(t, brokers, dlq)
	if len(dead) != 1 {
		t.Fatalf("dead-letter topic holds %d records, want 1", len(dead))
	}
	d := dead[0]
	headers := map[string]string{}
	for _, h := range d.Headers {
		headers[h.Key] = string(h.Value)
	}
	if string(d.Value) != "not json {" || headers["origin"] != "test" || headers[kafka.HeaderTopic] != topic ||
		headers[kafka.HeaderPartition] != "0" || headers[kafka.HeaderOffset] != "10" || headers[kafka.HeaderError] == "" {
		t.Fatalf("dead letter %q with headers %v", d.Value, headers)
	}
}
