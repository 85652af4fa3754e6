package kafka_test

import (
	"path/filepath"
	"testing"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
)

// TestStopProduceRestore stops a job with a checkpoint midway, produces
// more, and restores: every record arrives exactly once, per partition.
func TestStopProduceRestore(t *testing.T) {
	const partitions = 4
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, partitions)
	produceEvents(t, brokers, topic, partitions, 0, 2000)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := kafka.Config{Brokers: brokers, Topics: []string{topic}}

	first := runToStop(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 1, 700), out)
	if len(first) < 700 || len(first) >= 2000 {
		t.Fatalf("the first run committed %d records, want the 700 it stopped after and a few more", len(first))
	}
	t.Logf("first run committed %d records", len(first))
	produceEvents(t, brokers, topic, partitions, 2000, 3000)
	got := runUntilCommitted(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 1, 0), out, 3000)
	checkSeqs(t, got, 3000)
}
