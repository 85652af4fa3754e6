package build

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
)

// TestProducerResumes stops a datagen producer several times at once
// (context cancelled mid-stream) and checks that the topic ends with every
// record 0..count-1 exactly once, each in partition n mod 3, in order.
func TestProducerResumes(t *testing.T) {
	const count = 6000
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	p := load(t, fmt.Sprintf(jobFile, 3, count, topic))
	gen, err := p.NewGenerator(0)
	if err != nil {
		t.Fatal(err)
	}
	d := *p.Spec.Sources[0].Datagen
	d.Rate = 20_000
	pr := &producer{gen: gen, rows: p.NewRowBuilder(), spec: &d, conn: kafka.Connection{Brokers: brokers}, partitions: 3, log: testLogger()}
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(50+40*i)*time.Millisecond)
		if err := pr.run(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	d.Rate = 0
	if err := pr.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := kafkatest.ConsumeAll(t, brokers, topic)
	if len(recs) != count {
		t.Fatalf("%d records, want %d", len(recs), count)
	}
	last := map[int32]int64{0: -3, 1: -2, 2: -1}
	for _, r := range recs {
		n, err := strconv.ParseInt(string(r.Key), 10, 64)
		if err != nil || n != last[r.Partition]+3 {
			t.Fatalf("partition %d: record %s after %d", r.Partition, r.Key, last[r.Partition])
		}
		last[r.Partition] = n
		want := string(p.NewRowBuilder().AppendJSON(nil, gen.Row(n)))
		if string(r.Value) != want {
			t.Fatalf("record %d: %s, want %s", n, r.Value, want)
		}
	}
	if last[0] != count-3 || last[1] != count-2 || last[2] != count-1 {
		t.Fatalf("last records %v", last)
	}
}
