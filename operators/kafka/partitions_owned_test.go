package kafka_test

import (
	"path/filepath"
	"testing"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
)

// TestOnlyListedPartitions: a source with Partitions set reads those
// partitions of its topic and no other, spread over its subtasks, also
// after a restore (the partitions of a repartition topic that an instance
// of a scaled job owns, docs/SCALING.md).
func TestOnlyListedPartitions(t *testing.T) {
	const partitions = 5
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, partitions)
	produceEvents(t, brokers, topic, partitions, 0, 1000) // seq on partition seq mod 5
	dir := t.TempDir()
	cfg := boundedConfig(brokers, topic)
	cfg.Partitions = []int32{1, 3}
	owned := func(seq uint64) bool { return seq%partitions == 1 || seq%partitions == 3 }

	got := runBounded(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 2, 0), dir)
	checkExactly(t, got, 1000, owned)

	// Restored, unbounded: the checkpoint holds offsets of partitions 1 and
	// 3 only; records produced since are read from them alone.
	produceEvents(t, brokers, topic, partitions, 1000, 2000)
	cfg.Bounded = false
	got = runUntilCommitted(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 3, 0), filepath.Join(dir, "out"), 800)
	checkExactly(t, got, 2000, owned)
}

// TestNegativePartitionRefused: a negative partition number is a
// configuration error.
func TestNegativePartitionRefused(t *testing.T) {
	_, err := kafka.NewSource(kafka.Config{Connection: kafka.Connection{Brokers: []string{"x:1"}},
		Topics: []string{"t"}, Partitions: []int32{2, -1}}, eventFormat)
	if err == nil {
		t.Fatal("a negative partition was accepted")
	}
	t.Log(err)
}
