package repartition

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
// writing, syncing, claiming). Each op's table is closed after it, outside
// the timer: rows/cpu-s then counts every op's whole work, rows the table
// stores in the background after Take returned included, and no op's
// leftovers (a background store, a full row cache for the GC to scan) run
// into the next one's time.
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
		off, err := h.commit(ctx, rows[i:i+10_000], nil, Seal{Owner: h.cfg.Owner, Epoch: h.Epoch, BasedOn: h.last, Resume: int64(i), Checkpoint: uint64(i + 1), Table: src.ID()})
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
		b.StopTimer()
		h.Close()
		if h.Rebuilt != benchRows {
			b.Fatalf("rebuilt %d rows, want %d", h.Rebuilt, benchRows)
		}
		if err := dst.Close(); err != nil {
			b.Fatal(err)
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

// handoverRows is how many users BenchmarkHandover's input spreads over
// the buckets.
const handoverRows = 20_000

// BenchmarkHandover measures a failover under dynamic ownership: owners A
// and B share the 8 partitions (Owners, one process); A's buckets hold
// handoverRows/2 rows in all, published to the owner log; A is ended
// without a final checkpoint (its group client leaves, as the group
// removes a SIGKILLed member after the session timeout), and one more row
// of each of A's buckets is written to the repartition topic. One op is
// the time from A's end to B's table holding those rows: the revocation
// on B's side, B's stop with a final checkpoint and publish, the
// handovers of A's partitions (fence, read, rebuild, claim) and stage 2's
// restart. A SIGKILLed runner adds the session timeout before it.
func BenchmarkHandover(b *testing.B) {
	var total time.Duration
	rebuilt := 0.0
	for range b.N {
		d, rows := handoverOnce(b)
		total += d
		rebuilt += rows
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/handover")
	b.ReportMetric(rebuilt/float64(b.N), "rows-rebuilt/handover")
}

func handoverOnce(b *testing.B) (time.Duration, float64) {
	b.StopTimer()
	defer b.StartTimer()
	brokers := kafkatest.Brokers(b)
	topic := kafkatest.TopicName(b, brokers)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	type owner struct {
		table  *aggmerge.Table
		owners *Owners
		stop   context.CancelFunc
		done   chan error
	}
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	start := func(i int, m *Metrics) *owner {
		dir := b.TempDir()
		table, router := openScaleTable(b, dir)
		o := &owner{table: table, done: make(chan error, 1)}
		cfg := ownersConfig(brokers, topic, i, dir, table, router)
		cfg.Metrics = m
		o.owners = NewOwners(cfg)
		ctx, stop := context.WithCancel(b.Context())
		o.stop = stop
		go func() { o.done <- o.owners.Run(ctx) }()
		return o
	}
	codecOf := func(t *aggmerge.Table) *Codec {
		c, err := NewCodec(t, "scale", nil)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	produce := func(c *Codec, users []string) {
		var recs []*kgo.Record
		send := c.Sender(orderRow)
		for _, u := range users {
			err := send(&kgo.Record{Value: []byte(u + ",1")}, func(key, value []byte) {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(aggmerge.BucketOf(key, scaleBuckets)), Key: key, Value: value})
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := cl.ProduceSync(b.Context(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	ownerOf := func(t *aggmerge.Table, u string) int32 {
		key, err := t.EncodeKey([]agg.Value{agg.StringValue(u)})
		if err != nil {
			b.Fatal(err)
		}
		return int32(aggmerge.BucketOf(key, scaleBuckets))
	}
	a, bo := start(0, nil), start(1, metrics)
	waitOwners := func(os ...*owner) {
		deadline := time.Now().Add(kafkatest.Timeout)
		for {
			n, each := 0, true
			for _, o := range os {
				n += len(o.owners.Owned())
				each = each && len(o.owners.Owned()) > 0
			}
			if n == scaleBuckets && each {
				return
			}
			if time.Now().After(deadline) {
				for _, o := range os {
					select {
					case err := <-o.done:
						b.Errorf("an owner ended: %v", err)
					default:
					}
				}
				b.Fatalf("the owners never shared the partitions: %v, %v", os[0].owners.Owned(), os[1].owners.Owned())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitOwners(a, bo)
	users := make([]string, handoverRows)
	for i := range users {
		users[i] = fmt.Sprintf("u%d", i)
	}
	c := codecOf(a.table)
	produce(c, users)
	ofA := map[int32]bool{}
	for _, p := range a.owners.Owned() {
		ofA[p] = true
	}
	// A has applied and published its rows when its table holds them.
	waitRows := func(t *aggmerge.Table, n uint64) {
		deadline := time.Now().Add(kafkatest.Timeout)
		for t.Count() < n {
			if time.Now().After(deadline) {
				b.Fatalf("%d rows, want %d", t.Count(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var inA []string
	for _, u := range users {
		if ofA[ownerOf(a.table, u)] {
			inA = append(inA, u)
		}
	}
	waitRows(a.table, uint64(len(inA)))
	time.Sleep(300 * time.Millisecond) // a checkpoint or two, published
	var marks []string
	for p := range ofA {
		for i := 0; ; i++ {
			u := fmt.Sprintf("mark-%d", i)
			if ownerOf(a.table, u) == p {
				marks = append(marks, u)
				break
			}
		}
	}
	before, rebuilt0 := bo.table.Count(), rebuiltRows(b, reg)
	b.StartTimer()
	t0 := time.Now()
	a.stop()
	<-a.done
	produce(c, marks)
	waitRows(bo.table, before+uint64(len(inA)+len(marks)))
	d := time.Since(t0)
	b.StopTimer()
	bo.owners.Stop()
	if err := <-bo.done; err != nil {
		b.Fatal(err)
	}
	return d, rebuiltRows(b, reg) - rebuilt0
}

// rebuiltRows reads ebbflow_repartition_rows_rebuilt_total from reg.
func rebuiltRows(b *testing.B, reg *prometheus.Registry) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ebbflow_repartition_rows_rebuilt_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
