package kafka_test

import (
	"context"
	"flag"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

var benchRecords = flag.Int("kafka.records", 2_000_000, "records BenchmarkSource preloads")

// BenchmarkSource measures, on one broker and one preloaded topic (~100 B
// JSON records over 4 partitions), the raw franz-go consume rate (a plain
// PollFetches loop, read_committed like the source) and the rate of the
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

	b.Run("raw", func(b *testing.B) {
		measure(b, n, func() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart(),
					1: kgo.NewOffset().AtStart(), 2: kgo.NewOffset().AtStart(), 3: kgo.NewOffset().AtStart()}}))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			got, touched := 0, 0
			for got < n {
				fetches := cl.PollFetches(b.Context())
				if errs := fetches.Errors(); len(errs) > 0 {
					b.Fatalf("consume: %v", errs[0].Err)
				}
				fetches.EachRecord(func(r *kgo.Record) {
					got++
					touched += len(r.Key) + len(r.Value)
				})
			}
			if touched != bytes {
				b.Fatalf("touched %d bytes, want %d", touched, bytes)
			}
		})
	})
	cfg := kafka.Config{Brokers: brokers, Topics: []string{topic}}
	for _, par := range []int{1, 2} {
		b.Run(fmt.Sprintf("source-raw/p=%d", par), func(b *testing.B) {
			benchJob(b, n, par, newSource(b, cfg, kafka.Raw()))
		})
		b.Run(fmt.Sprintf("source-rows/p=%d", par), func(b *testing.B) {
			benchJob(b, n, par, newSource(b, cfg, kafka.Rows()))
		})
	}
}

// benchJob times source → discard until n records arrived.
func benchJob[T any](b *testing.B, n, par int, src *kafka.Source[T]) {
	measure(b, n, func() {
		var count atomic.Int64
		j := runtime.NewJob(runtime.Options{Name: "bench", Parallelism: par,
			Checkpoint: runtime.CheckpointOptions{Interval: time.Second}})
		runtime.SinkTo(runtime.FromSource(j, "kafka", src.New), "discard", operators.NewDiscard[T](&count))
		ctx, cancel := context.WithCancel(b.Context())
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx) }()
		for count.Load() < int64(n) {
			select {
			case err := <-done:
				b.Fatalf("job ended after %d of %d records: %v", count.Load(), n, err)
			case <-time.After(time.Millisecond):
			}
		}
		b.StopTimer()
		cancel()
		<-done
		if got := count.Load(); got != int64(n) {
			b.Fatalf("read %d records, want %d", got, n)
		}
		b.StartTimer()
	})
}

// measure runs one timed pass per iteration and reports records/s and
// process CPU per record.
func measure(b *testing.B, n int, pass func()) {
	var cpu time.Duration
	for b.Loop() {
		before := cpuTime(b)
		pass()
		cpu += cpuTime(b) - before
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rec/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu-µs/rec")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
