package kafka_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// TestTransactionalInput reads a topic written by committed, aborted and
// open transactions and plain producers: under read_committed only the
// committed and plain records reach the job, and nothing of the open
// transaction until it commits.
func TestTransactionalInput(t *testing.T) {
	const partitions = 3
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, partitions)
	txn := kafkatest.Client(t, brokers, kgo.TransactionalID(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	write := func(from, to uint64, end kgo.TransactionEndTry, close bool) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(t.Context(), eventRecords(topic, partitions, from, to, testKeys)...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if close {
			if err := txn.EndTransaction(t.Context(), end); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 100, kgo.TryCommit, true)
	write(100, 200, kgo.TryAbort, true)
	produceEvents(t, brokers, topic, partitions, 200, 300)
	write(300, 400, kgo.TryCommit, true)
	write(400, 500, kgo.TryAbort, false) // left open

	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	committed := func(seq uint64) bool { return seq < 100 || seq >= 200 && seq < 400 }
	src := newSource(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}, eventFormat)
	got := runUntilCommitted(t, eventJob(t, dir, src, 2, 0), out, 300, func() {
		time.Sleep(300 * time.Millisecond) // time to read past the LSO, if it did
	})
	checkExactly(t, got, 500, committed)

	// Once the open transaction commits, its records follow.
	if err := txn.EndTransaction(t.Context(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	src = newSource(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}, eventFormat)
	got = runUntilCommitted(t, eventJob(t, dir, src, 2, 0), out, 400)
	checkExactly(t, got, 500, func(seq uint64) bool { return committed(seq) || seq >= 400 })
}

// TestStartPositions checks each start position of a job without
// checkpoint against the exact records it must read.
func TestStartPositions(t *testing.T) {
	const partitions = 2
	brokers := kafkatest.Brokers(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	// seqs [0, 100) stamped t0, [100, 200) stamped t0+1min; seq on
	// partition seq%2 at offset seq/2.
	setup := func(t *testing.T) string {
		topic := kafkatest.NewTopic(t, brokers, partitions)
		recs := eventRecords(topic, partitions, 0, 200, testKeys)
		for i, r := range recs {
			r.Timestamp = t0
			if i >= 100 {
				r.Timestamp = t0.Add(time.Minute)
			}
		}
		kafkatest.Produce(t, brokers, recs...)
		return topic
	}
	// run runs a fresh job until want records are committed; produce, if
	// set, runs once the first checkpoint completed, that is once the start
	// offsets are resolved.
	run := func(t *testing.T, cfg kafka.Config, want int, produce func()) []operators.Event {
		dir := t.TempDir()
		reg := prometheus.NewRegistry()
		j := eventJob(t, dir, newSource(t, cfg, eventFormat), 2, 0, func(o *runtime.Options) { o.Registerer = reg })
		return runUntilCommitted(t, j, filepath.Join(dir, "out"), want, func() {
			if produce == nil {
				return
			}
			for deadline := time.Now().Add(20 * time.Second); counter(t, reg, "ebbflow_checkpoints_total", "status", "completed") < 1; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no checkpoint completed")
				}
			}
			produce()
		})
	}

	t.Run("earliest", func(t *testing.T) {
		topic := setup(t)
		got := run(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}, 200, nil)
		checkSeqs(t, got, 200)
	})
	t.Run("latest", func(t *testing.T) {
		topic := setup(t)
		got := run(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, Start: kafka.StartLatest()}, 100, func() {
			produceEvents(t, brokers, topic, partitions, 200, 300)
		})
		checkExactly(t, got, 300, func(seq uint64) bool { return seq >= 200 })
	})
	t.Run("timestamp", func(t *testing.T) {
		topic := setup(t)
		got := run(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, Start: kafka.StartAt(t0.Add(time.Second))}, 100, nil)
		checkExactly(t, got, 200, func(seq uint64) bool { return seq >= 100 })
	})
	t.Run("offsets", func(t *testing.T) {
		topic := setup(t)
		start := kafka.StartOffsets(map[string]map[int32]int64{topic: {0: 10}}) // partition 1 not listed: earliest
		got := run(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, Start: start}, 190, nil)
		checkExactly(t, got, 200, func(seq uint64) bool { return seq%2 == 1 || seq >= 20 })
	})
	t.Run("committed", func(t *testing.T) {
		topic := setup(t)
		group := topic + "-group"
		adm := kafkatest.Admin(t, brokers)
		var o kadm.Offsets
		o.Add(kadm.Offset{Topic: topic, Partition: 0, At: 25, LeaderEpoch: -1})
		if resp, err := adm.CommitOffsets(t.Context(), group, o); err != nil || resp.Error() != nil {
			t.Fatalf("commit: %v %v", err, resp.Error())
		}
		// Partition 0 from its committed 25 (seq 50), partition 1 has no
		// commit: from its latest.
		cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, Group: group, Start: kafka.StartCommitted(kafka.StartLatest())}
		got := run(t, cfg, 175, func() {
			produceEvents(t, brokers, topic, partitions, 200, 300)
		})
		checkExactly(t, got, 300, func(seq uint64) bool { return seq%2 == 0 && seq >= 50 || seq >= 200 })

		// The completed checkpoints' offsets were committed to the group:
		// everything, as the job stopped with a final checkpoint.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		resp, err := adm.FetchOffsets(ctx, group)
		if err != nil || resp.Error() != nil {
			t.Fatalf("fetch offsets: %v %v", err, resp.Error())
		}
		for p := range int32(partitions) {
			if c, _ := resp.Lookup(topic, p); c.At != 150 {
				t.Errorf("partition %d: group offset %d, want 150", p, c.At)
			}
		}
	})
}

// TestRestoreIgnoresStartPosition stops a job that started at latest,
// produces more and adds a partition while it is down, and restores it: it
// resumes at its checkpointed offsets (not at the latest ones again), and
// reads the new partition, absent from the checkpoint, from its earliest
// offset.
func TestRestoreIgnoresStartPosition(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 2)
	produceEvents(t, brokers, topic, 2, 0, 100) // before the start: never read
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, Start: kafka.StartLatest()}
	reg := prometheus.NewRegistry()
	j := eventJob(t, dir, newSource(t, cfg, eventFormat), 1, 0, func(o *runtime.Options) { o.Registerer = reg })
	runUntilCommitted(t, j, out, 100, func() {
		for deadline := time.Now().Add(20 * time.Second); counter(t, reg, "ebbflow_checkpoints_total", "status", "completed") < 1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no checkpoint completed")
			}
		}
		produceEvents(t, brokers, topic, 2, 100, 200)
	})

	// While the job is down: more records, and a third partition.
	produceEvents(t, brokers, topic, 2, 200, 300)
	if _, err := kafkatest.Admin(t, brokers).CreatePartitions(t.Context(), 1, topic); err != nil {
		t.Fatal(err)
	}
	more := eventRecords(topic, 1, 300, 400, testKeys) // to partition 0, then the new 2
	for _, r := range more[50:] {
		r.Partition = 2
	}
	kafkatest.Produce(t, brokers, more...)
	got := runUntilCommitted(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 1, 0), out, 300)
	checkExactly(t, got, 400, func(seq uint64) bool { return seq >= 100 })
}
