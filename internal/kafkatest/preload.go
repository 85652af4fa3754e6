package kafkatest

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Preload produces n records of ~100 B JSON round-robin over the topic's
// partitions, uncompressed, and returns their key and value bytes. Record
// i has key u<i mod 100000> and a value with seq i. Records are made one at
// a time so that the caller holds no large pointer slice for the GC to scan.
func Preload(t testing.TB, brokers []string, topic string, n, partitions int) int {
	t.Helper()
	return PreloadValues(t, brokers, topic, n, partitions, func(i int) []byte {
		return fmt.Appendf(nil, `{"user":"u%05d","amount":%d,"ts":%d,"kind":"purchase","region":"eu-west-1","seq":%d}`,
			i%100_000, i%997, 1_700_000_000_000+int64(i), i)
	})
}

// PreloadValues is Preload with record i's value made by value(i) (the key
// stays u<i mod 100000>): for a benchmark that needs another shape of
// input, such as another pace of event time.
func PreloadValues(t testing.TB, brokers []string, topic string, n, partitions int, value func(i int) []byte) int {
	t.Helper()
	cl := Client(t, brokers,
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.DefaultProduceTopic(topic),
	)
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	ctx := timeoutContext(t)
	bytes := 0
	for i := range n {
		key := fmt.Appendf(nil, "u%05d", i%100_000)
		value := value(i)
		bytes += len(key) + len(value)
		cl.Produce(ctx, &kgo.Record{Partition: int32(i % partitions), Key: key, Value: value}, promise)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("kafkatest: preload: flush: %v", err)
	}
	if err := failed.Load(); err != nil {
		t.Fatalf("kafkatest: preload: %v", *err)
	}
	return bytes
}
