package kafkatest

import (
	"flag"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/cputime"
)

var benchRecords = flag.Int("kafkatest.records", 1_000_000, "records BenchmarkConsume preloads")

// BenchmarkConsume measures the raw franz-go consume rate, the baseline the
// Kafka source is held to: it preloads ~100 B JSON records round-robin over 4
// partitions (uncompressed), then times a plain PollFetches loop that reads
// them all from the start, touching every key and value. Against the
// embedded broker by default, against real Kafka with EBBFLOW_KAFKA_BROKERS:
//
//	go test -run XXX -bench Consume -benchtime 3x ./internal/kafkatest/
//
// cpu-µs/rec is this process's CPU time, so it includes the embedded broker
// but not a real one.
func BenchmarkConsume(b *testing.B) {
	const partitions = 4
	n := *benchRecords
	brokers := Brokers(b)
	topic := NewTopic(b, brokers, partitions)
	bytes := Preload(b, brokers, topic, n, partitions)

	from := make(map[int32]kgo.Offset)
	for p := range int32(partitions) {
		from[p] = kgo.NewOffset().AtStart()
	}
	var cpu time.Duration
	for b.Loop() {
		before := cputime.Process()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
		if err != nil {
			b.Fatal(err)
		}
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
		cl.Close()
		cpu += cputime.Process() - before
		if got != n || touched != bytes {
			b.Fatalf("consumed %d records of %d bytes, want %d of %d", got, touched, n, bytes)
		}
	}
	b.SetBytes(int64(bytes))
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rec/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu-µs/rec")
}
