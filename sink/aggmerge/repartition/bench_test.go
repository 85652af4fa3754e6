package repartition

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// benchRows is the bucket size of BenchmarkRebuild.
const benchRows = 200_000

// BenchmarkRebuild measures a handover's rebuild: Take of a partition whose
// owner log holds benchRows row images (in transactions of 10,000 rows),
// into a fresh table. One op is one Take; rows/s counts the rows written to
// the table per second of the whole Take (fencing, reading the owner log,
// writing, syncing, claiming).
func BenchmarkRebuild(b *testing.B) {
	ctx := b.Context()
	brokers := kafkatest.Brokers(b)
	topic := kafkatest.TopicName(b, brokers)
	src := freshTable(b)
	h, err := Take(ctx, ownerConfig(brokers, topic, 0), src, 0)
	if err != nil {
		b.Fatal(err)
	}
	var rows []*kgo.Record
	for i := 0; len(rows) < benchRows; i++ {
		key, err := src.EncodeKey([]agg.Value{agg.StringValue(fmt.Sprintf("user-%d", i))})
		if err != nil {
			b.Fatal(err)
		}
		if aggmerge.BucketOf(key, scaleBuckets) != 0 {
			continue
		}
		v, err := appendImage(nil, h.Epoch, []agg.Value{agg.IntValue(int64(i)), agg.IntValue(int64(i % 1000))})
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, &kgo.Record{Key: key, Value: v})
	}
	for i := 0; i < len(rows); i += 10_000 {
		off, err := h.commit(ctx, rows[i:i+10_000], Seal{Owner: h.cfg.Owner, Epoch: h.Epoch, BasedOn: h.last, Resume: int64(i), Checkpoint: uint64(i + 1), Table: src.ID()})
		if err != nil {
			b.Fatal(err)
		}
		h.last = off
	}
	h.Close()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := range b.N {
		b.StopTimer()
		dst := freshTable(b)
		b.StartTimer()
		h, err := Take(ctx, ownerConfig(brokers, topic, i+1), dst, 0)
		if err != nil {
			b.Fatal(err)
		}
		h.Close()
		if h.Rebuilt != benchRows {
			b.Fatalf("rebuilt %d rows, want %d", h.Rebuilt, benchRows)
		}
	}
	b.ReportMetric(float64(b.N*benchRows)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(b.N*benchRows)/(cpuTime(b)-cpu0).Seconds(), "rows/cpu-s")
}

// cpuTime is the CPU time the process used so far (user and system, every
// goroutine: the embedded broker's too), a measure that a loaded machine
// disturbs less than the elapsed time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
