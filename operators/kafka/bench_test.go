package kafka_test

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/cputime"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

var benchRecords = flag.Int("kafka.records", 2_000_000, "records BenchmarkSource preloads")

// BenchmarkSource measures, on one broker and one preloaded topic (~100 B
// JSON records over 4 partitions), the raw franz-go consume rate (plain
// PollFetches loops, read_committed like the source, 1 or 2 clients
// splitting the partitions as 1 or 2 subtasks would) and the rate of the
// source feeding a discarding sink, raw and decoded into Rows, at
// parallelism 1 and 2. Against the embedded broker by default, against
// real Kafka with EBBFLOW_KAFKA_BROKERS:
//
//	go test -run XXX -bench Source -benchtime 3x ./operators/kafka/
//
// cpu-µs/rec is this process's CPU time (so it includes an embedded broker).
func BenchmarkSource(b *testing.B) {
	const partitions = 4
	n := *benchRecords
	brokers := kafkatest.Brokers(b)
	topic := kafkatest.NewTopic(b, brokers, partitions)
	bytes := kafkatest.Preload(b, brokers, topic, n, partitions)
	b.Logf("preloaded %d records, %d bytes", n, bytes)

	for _, par := range []int{1, 2} {
		b.Run(fmt.Sprintf("raw/p=%d", par), func(b *testing.B) {
			measure(b, n, func(first func()) { rawConsume(b, brokers, topic, partitions, par, n, bytes, first) })
		})
	}
	cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}
	for _, par := range []int{1, 2} {
		b.Run(fmt.Sprintf("source-raw/p=%d", par), func(b *testing.B) {
			benchJob(b, n, par, newSource(b, cfg, kafka.Raw()))
		})
		b.Run(fmt.Sprintf("source-rows/p=%d", par), func(b *testing.B) {
			benchJob(b, n, par, newSource(b, cfg, kafka.Rows()))
		})
	}
}

// rawConsume reads the n records of topic with par franz-go clients, each
// running a plain PollFetches loop over its share of the partitions and
// touching every key and value.
func rawConsume(b *testing.B, brokers []string, topic string, partitions, par, n, bytes int, first func()) {
	var once sync.Once
	var wg sync.WaitGroup
	var got, touched atomic.Int64
	for i := range par {
		from := make(map[int32]kgo.Offset)
		share := 0 // records of this client's partitions (Preload goes round-robin)
		for p := i; p < partitions; p += par {
			from[int32(p)] = kgo.NewOffset().AtStart()
			share += (n - p + partitions - 1) / partitions
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		wg.Go(func() {
			for mine := 0; mine < share; {
				fetches := cl.PollFetches(b.Context())
				if errs := fetches.Errors(); len(errs) > 0 {
					b.Errorf("consume: %v", errs[0].Err)
					return
				}
				k, t := 0, 0
				fetches.EachRecord(func(r *kgo.Record) {
					k++
					t += len(r.Key) + len(r.Value)
				})
				if k > 0 {
					once.Do(first)
				}
				mine += k
				got.Add(int64(k))
				touched.Add(int64(t))
			}
		})
	}
	wg.Wait()
	if got.Load() != int64(n) || touched.Load() != int64(bytes) {
		b.Fatalf("consumed %d records of %d bytes, want %d of %d", got.Load(), touched.Load(), n, bytes)
	}
}

// benchJob times source → discard until n records arrived.
func benchJob[T any](b *testing.B, n, par int, src *kafka.Source[T]) {
	measure(b, n, func(first func()) {
		ts := &timing{n: int64(n), first: first, done: make(chan struct{})}
		discard := operators.NewDiscard[T](nil)
		j := runtime.NewJob(runtime.Options{Name: "bench", Parallelism: par,
			Checkpoint: runtime.CheckpointOptions{Interval: time.Second}})
		runtime.SinkTo(runtime.FromSource(j, "kafka", src.New), "discard", func() runtime.Sink[T] {
			return timedSink[T]{Sink: discard(), t: ts}
		})
		ctx, cancel := context.WithCancel(b.Context())
		ended := make(chan error, 1)
		go func() { ended <- j.Run(ctx) }()
		select {
		case err := <-ended:
			b.Fatalf("job ended after %d of %d records: %v", ts.count.Load(), n, err)
		case <-ts.done:
		}
		b.StopTimer()
		cancel()
		<-ended
		if got := ts.count.Load(); got != int64(n) {
			b.Fatalf("read %d records, want %d", got, n)
		}
		b.StartTimer()
	})
}

// timing is shared by the subtasks of a timedSink: it calls first at the
// first batch and closes done at the n-th record, from the data path.
type timing struct {
	n         int64
	count     atomic.Int64
	started   sync.Once
	first     func()
	done      chan struct{}
	closeDone sync.Once
}

// timedSink is the discarding sink, timed per batch.
type timedSink[T any] struct {
	runtime.Sink[T]
	t *timing
}

func (s timedSink[T]) Write(batch []T) error {
	s.t.started.Do(s.t.first)
	if s.t.count.Add(int64(len(batch))) >= s.t.n {
		s.t.closeDone.Do(func() { close(s.t.done) })
	}
	return s.Sink.Write(batch)
}

// measure runs one pass per iteration. A pass calls first when its first
// records arrive: rec/s is the rate from there to the last record (the
// steady rate), start-ms the time before it (client or job start: metadata,
// offsets, the first checkpoint), cpu-µs/rec the process CPU per record.
func measure(b *testing.B, n int, pass func(first func())) {
	var cpu, steady, start time.Duration
	for b.Loop() {
		before, t0 := cputime.Process(), time.Now()
		var t1 time.Time
		pass(func() { t1 = time.Now() })
		steady += time.Since(t1)
		start += t1.Sub(t0)
		cpu += cputime.Process() - before
	}
	b.ReportMetric(float64(n*b.N)/steady.Seconds(), "rec/s")
	b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "start-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu-µs/rec")
}
