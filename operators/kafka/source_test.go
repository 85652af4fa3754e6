package kafka_test

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

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
	cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}

	first := runToStop(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 1, 700), out)
	if len(first) < 700 || len(first) >= 2000 {
		t.Fatalf("the first run committed %d records, want the 700 it stopped after and a few more", len(first))
	}
	t.Logf("first run committed %d records", len(first))
	produceEvents(t, brokers, topic, partitions, 2000, 3000)
	got := runUntilCommitted(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 1, 0), out, 3000)
	checkSeqs(t, got, 3000)
}

// TestRescale stops a job whose source has 2 subtasks and restores it with
// 3: every partition resumes at its offset, whichever subtask now owns it.
func TestRescale(t *testing.T) {
	const partitions = 7
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, partitions)
	produceEvents(t, brokers, topic, partitions, 0, 3000)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}

	first := runToStop(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 2, 1000), out)
	if len(first) >= 3000 {
		t.Fatalf("the first run committed all %d records: nothing left to resume", len(first))
	}
	t.Logf("first run (2 subtasks) committed %d records", len(first))
	produceEvents(t, brokers, topic, partitions, 3000, 4000)
	got := runUntilCommitted(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 3, 0), out, 4000)
	checkSeqs(t, got, 4000)
}

// TestDiscovery adds partitions to a topic and a topic matching the pattern
// while the job runs: both are read from their earliest offset.
func TestDiscovery(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 2)
	produceEvents(t, brokers, topic, 2, 0, 100)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, TopicPattern: "^" + regexp.QuoteMeta(topic) + "(-more)?$",
		DiscoveryInterval: 50 * time.Millisecond}
	j := eventJob(t, dir, newSource(t, cfg, eventFormat), 2, 0)

	grow := func() {
		// Grow while the job runs: 2 more partitions, and a second topic.
		time.Sleep(300 * time.Millisecond)
		adm := kafkatest.Admin(t, brokers)
		if _, err := adm.CreatePartitions(t.Context(), 2, topic); err != nil {
			t.Fatalf("create partitions: %v", err)
		}
		kafkatest.CreateTopic(t, brokers, topic+"-more", 1)
		t.Cleanup(func() { _, _ = adm.DeleteTopic(context.Background(), topic+"-more") })
		// seqs 100..199 over all 4 partitions, 200..299 to the new topic
		recs := eventRecords(topic, 4, 100, 200, testKeys)
		recs = append(recs, eventRecords(topic+"-more", 1, 200, 300, testKeys)...)
		kafkatest.Produce(t, brokers, recs...)
	}
	checkSeqs(t, runUntilCommitted(t, j, out, 300, grow), 300)
}

// TestNamedTopicCreatedLater starts a source on a named topic that does
// not exist yet, with a discovery interval far longer than the test: the
// topic, created after the open, is looked for again soon (a downstream
// job started before its upstream's changelog exists reads it once it
// does), not only at the next interval.
func TestNamedTopicCreatedLater(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.TopicName(t, brokers)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic},
		DiscoveryInterval: time.Hour}
	j := eventJob(t, dir, newSource(t, cfg, eventFormat), 2, 0)
	create := func() {
		time.Sleep(300 * time.Millisecond) // the source opened and found no topic
		kafkatest.CreateTopic(t, brokers, topic, 2)
		produceEvents(t, brokers, topic, 2, 0, 100)
	}
	checkSeqs(t, runUntilCommitted(t, j, out, 100, create), 100)
}
