package kafka_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// boundedConfig reads topic to its end offsets as of the first open.
func boundedConfig(brokers []string, topic string) kafka.Config {
	return kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, Bounded: true}
}

// runBounded runs j, which must end by itself, and returns what the sink
// committed; it fails unless a completed checkpoint exists.
func runBounded(t *testing.T, j *runtime.Job, dir string) []operators.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	if err := j.Run(ctx); err != nil {
		t.Fatalf("bounded run: %v, want it to end by itself", err)
	}
	storage, err := state.OpenStorage(filepath.Join(dir, "jobs", "kafka-test", "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := storage.Latest(); err != nil {
		t.Fatalf("no final checkpoint: %v", err)
	}
	got, err := operators.ReadCommitted(filepath.Join(dir, "out"), eventCodec)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestBoundedSource reads a topic of 3 partitions, one of them empty, to
// its end offsets as of the start: the job ends by itself with a final
// checkpoint and exactly the records there were, although more, on every
// partition, are produced once it reads.
func TestBoundedSource(t *testing.T) {
	const n = 300
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	produceEvents(t, brokers, topic, 2, 0, n) // partition 2 stays empty
	late := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))

	dir := t.TempDir()
	o := runtime.Options{Name: "kafka-test", DataDir: dir, BatchSize: 7,
		Checkpoint: runtime.CheckpointOptions{Interval: 30 * time.Millisecond},
		Restart:    runtime.RestartOptions{MaxAttempts: -1}}
	j := runtime.NewJob(o)
	src := newSource(t, boundedConfig(brokers, topic), eventFormat)
	s := runtime.FromSource(j, "kafka", src.New, runtime.WithParallelism(2))
	var once sync.Once
	var lateErr error
	s = runtime.Map(s, "produce-late", func(e operators.Event) operators.Event {
		// The source opened, so its stop offsets are set: these come after.
		once.Do(func() {
			lateErr = late.ProduceSync(context.Background(), eventRecords(topic, 3, n, n+30, testKeys)...).FirstErr()
		})
		return e
	})
	runtime.SinkTo(s, "collect", operators.NewCollectSink(filepath.Join(dir, "out"), eventCodec), runtime.WithParallelism(2))
	got := runBounded(t, j, dir)
	if lateErr != nil {
		t.Fatalf("produce late records: %v", lateErr)
	}
	checkSeqs(t, got, n)
}

// TestBoundedTransactional reads a topic written in transactions, so that
// the end offset of every partition lies past its last record (a commit or
// abort marker): the bounded job still ends, with the committed records.
func TestBoundedTransactional(t *testing.T) {
	const partitions = 3
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, partitions)
	txn := kafkatest.Client(t, brokers, kgo.TransactionalID(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	write := func(from, to uint64, end kgo.TransactionEndTry) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(t.Context(), eventRecords(topic, partitions, from, to, testKeys)...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(t.Context(), end); err != nil {
			t.Fatal(err)
		}
	}
	write(0, 100, kgo.TryCommit)
	write(100, 200, kgo.TryCommit)
	write(200, 230, kgo.TryAbort) // partitions end with aborted records and a marker

	dir := t.TempDir()
	got := runBounded(t, eventJob(t, dir, newSource(t, boundedConfig(brokers, topic), eventFormat), 2, 0), dir)
	checkExactly(t, got, 230, func(seq uint64) bool { return seq < 200 })
}

// TestBoundedRestore stops a bounded job half way with a final checkpoint,
// produces more records, and restores it: the restored run ends by itself
// at the offsets of the first start, not at the end as of its restart.
func TestBoundedRestore(t *testing.T) {
	const n = 400
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	produceEvents(t, brokers, topic, 3, 0, n)

	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	first := runToStop(t, eventJob(t, dir, newSource(t, boundedConfig(brokers, topic), eventFormat), 2, n/4), out)
	if len(first) >= n {
		t.Fatalf("the first run committed %d records, want it stopped before the end", len(first))
	}
	produceEvents(t, brokers, topic, 3, n, n+60)
	// Parallelism 3 on restore: the stop offsets follow their partitions.
	got := runBounded(t, eventJob(t, dir, newSource(t, boundedConfig(brokers, topic), eventFormat), 3, 0), dir)
	checkSeqs(t, got, n)
}
