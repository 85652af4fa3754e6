package writer_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/cputime"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

var (
	benchRecords   = flag.Int("records", 1_000_000, "records preloaded for BenchmarkKafkaToTable")
	benchFlush     = flag.Duration("flush", 100*time.Millisecond, "the writer's FlushInterval in BenchmarkKafkaToTable")
	benchPar       = flag.Int("par", 1, "the job's parallelism in BenchmarkKafkaToTable")
	benchDistinct  = flag.Int("distinct", 1_000_000, "distinct keys (one record each) in BenchmarkDistinctKeys")
	benchChangelog = flag.Bool("changelog", false, "BenchmarkKafkaToTable also exports the table's changelog (committed mode) to the same broker, "+
		"with table versions and without (export.Config.NoVersions), in turn: what publishing versions costs")
)

// benchExport is a changelog variant of BenchmarkKafkaToTable: none, or
// committed with versions or without.
type benchExport struct {
	name       string
	on         bool
	noVersions bool
}

// benchExports are the variants: without -changelog none, with it
// committed with versions and without, in turn.
func benchExports() []benchExport {
	if !*benchChangelog {
		return []benchExport{{name: "table"}}
	}
	return []benchExport{{"changelog", true, false}, {"changelog-no-versions", true, true}}
}

type purchase struct {
	user   string
	amount int64
}

// counter passes batches through and stops the job once n records passed.
type counter struct {
	seen *atomic.Int64
	n    int64
	stop func()
}

func (c counter) Open(*runtime.Context) error { return nil }
func (c counter) ProcessBatch(in []purchase, out *runtime.Collector[purchase]) error {
	for _, p := range in {
		out.Emit(p)
	}
	if c.seen.Add(int64(len(in))) >= c.n {
		c.stop()
	}
	return nil
}
func (c counter) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (c counter) NotifyComplete(barrier.CheckpointID) error { return nil }
func (c counter) Close() error                              { return nil }

// rawConsume times a plain franz-go consumer over the whole topic.
func rawConsume(b *testing.B, brokers []string, topic string, n int) float64 {
	cl := kafkatest.Client(b, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	start := time.Now()
	got := 0
	for got < n {
		fs := cl.PollFetches(context.Background())
		got += fs.NumRecords()
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkKafkaToTable: Kafka (preloaded, 4 partitions, 100k users) →
// decode → exactly-once writer (sum, count, max per user), checkpoints
// every second, with and without combining; reported next to the raw
// franz-go consume rate of the same topic. Run with -benchtime 1x.
//
// With -changelog an exporter publishes the table's changelog beside the
// job (committed mode, to the same broker), with versions and without in
// turn (so -count N interleaves the pairs): records/s then runs to the
// changelog's catching up with the table, job-records/s to the job's end.
func BenchmarkKafkaToTable(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	topic := kafkatest.NewTopic(b, brokers, 4)
	n := *benchRecords
	kafkatest.Preload(b, brokers, topic, n, 4)
	raw := rawConsume(b, brokers, topic, n)
	b.Logf("raw franz-go consume: %.0f records/s", raw)
	for _, noCombine := range []bool{false, true} {
		name := "combine"
		if noCombine {
			name = "no-combine"
		}
		for _, ex := range benchExports() {
			b.Run(name+"/"+ex.name, func(b *testing.B) { kafkaToTable(b, brokers, topic, n, raw, noCombine, ex) })
		}
	}
}

// kafkaToTable runs BenchmarkKafkaToTable's job b.N times.
func kafkaToTable(b *testing.B, brokers []string, topic string, n int, raw float64, noCombine bool, ex benchExport) {
	for range b.N {
		i64 := agg.Type{Kind: agg.KindInt64}
		tbl, err := aggmerge.Open(b.TempDir(), aggmerge.Schema{
			Key:     []aggmerge.Column{{Name: "user", Type: agg.Type{Kind: agg.KindString}}},
			Values:  []aggmerge.Column{{Name: "total", Type: i64, Func: "sum"}, {Name: "n", Type: i64, Func: "count"}, {Name: "top", Type: i64, Func: "max"}},
			Buckets: 8,
		}, aggmerge.Options{})
		if err != nil {
			b.Fatal(err)
		}
		j := runtime.NewJob(runtime.Options{Name: "bench", DataDir: b.TempDir(), Parallelism: *benchPar,
			Checkpoint: runtime.CheckpointOptions{Interval: time.Second}})
		src, err := kafka.NewSource(kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}},
			kafka.JSONWith(func(v *fastjson.Value) (purchase, error) {
				return purchase{user: string(v.GetStringBytes("user")), amount: v.GetInt64("amount")}, nil
			}))
		if err != nil {
			b.Fatal(err)
		}
		var seen atomic.Int64
		counted := runtime.Apply(runtime.FromSource(j, "kafka", src.New), "count",
			func() runtime.Operator[purchase, purchase] { return counter{&seen, int64(n), j.Stop} })
		err = writer.To(counted, "table", writer.Config{Table: tbl, NoCombine: noCombine, FlushInterval: *benchFlush},
			func(p purchase, r *writer.Row) error {
				r.Key = append(r.Key[:0], agg.StringValue(p.user))
				r.Vals = append(r.Vals[:0], agg.IntValue(p.amount), agg.IntValue(1), agg.IntValue(p.amount))
				return nil
			})
		if err != nil {
			b.Fatal(err)
		}
		var x *export.Exporter
		exported := make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		if ex.on {
			cl := kafkatest.NewTopic(b, brokers, 8)
			if x, err = export.New(export.Config{Table: tbl, Name: "bench", Topic: cl, Kafka: kafka.Connection{Brokers: brokers},
				Mode: export.Committed, NoVersions: ex.noVersions, Registerer: prometheus.NewRegistry()}); err != nil {
				b.Fatal(err)
			}
		}
		start, cpu0 := time.Now(), cputime.Process()
		if x != nil {
			go func() { exported <- x.Run(ctx) }()
		}
		if err := j.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		jobRate := float64(n) / time.Since(start).Seconds()
		if x != nil {
			for !slices.Equal(x.Exported(), tbl.LogEnds()) {
				time.Sleep(time.Millisecond)
			}
		}
		rate := float64(n) / time.Since(start).Seconds()
		cpu := cputime.Process() - cpu0
		cancel()
		if x != nil {
			if err := <-exported; err != nil && !errors.Is(err, context.Canceled) {
				b.Fatal(err)
			}
			if _, published := x.LastVersion(); published == ex.noVersions {
				b.Fatalf("%s: a version published: %v", ex.name, published)
			}
			b.ReportMetric(jobRate, "job-records/s")
		}
		var total int64
		_ = tbl.Scan(func(r aggmerge.Row) error { total += r.Values[1].Int(); return nil })
		tbl.Close()
		if total != int64(n) {
			b.Fatalf("the table counts %d records, want %d", total, n)
		}
		b.ReportMetric(rate, "records/s")
		b.ReportMetric(100*rate/raw, "%raw")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/rec")
	}
}

// BenchmarkLatency measures, at a steady 50k records/s through the embedded
// Kafka, the time from a record's creation (its timestamp, set by the
// producer) to its row's change in the table's log, with and without
// combining. Run with -benchtime 1x; reports p50 and p99 in ms.
func BenchmarkLatency(b *testing.B) {
	const rate, seconds = 50_000, 4
	for _, noCombine := range []bool{true, false} {
		name := "no-combine"
		if !noCombine {
			name = "combine"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				p50, p99 := measureLatency(b, rate, seconds, noCombine)
				b.ReportMetric(p50, "p50-ms")
				b.ReportMetric(p99, "p99-ms")
			}
		})
	}
}

func measureLatency(b *testing.B, rate, seconds int, noCombine bool) (p50, p99 float64) {
	brokers := kafkatest.Brokers(b)
	topic := kafkatest.NewTopic(b, brokers, 4)
	i64 := agg.Type{Kind: agg.KindInt64}
	tbl, err := aggmerge.Open(b.TempDir(), aggmerge.Schema{
		Key:     []aggmerge.Column{{Name: "user", Type: i64}},
		Values:  []aggmerge.Column{{Name: "n", Type: i64, Func: "count"}, {Name: "ts", Type: i64, Func: "max"}},
		Buckets: 8,
	}, aggmerge.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tbl.Close()
	j := runtime.NewJob(runtime.Options{Name: "latency", DataDir: b.TempDir(), Checkpoint: runtime.CheckpointOptions{Interval: time.Second}})
	src, err := kafka.NewSource(kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, Start: kafka.StartLatest()},
		kafka.JSONWith(func(v *fastjson.Value) (purchase, error) {
			return purchase{amount: v.GetInt64("ts"), user: string(v.GetStringBytes("user"))}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	err = writer.To(runtime.FromSource(j, "kafka", src.New), "table", writer.Config{Table: tbl, NoCombine: noCombine},
		func(p purchase, r *writer.Row) error {
			uid, _ := strconv.ParseInt(p.user[1:], 10, 64)
			r.Key = append(r.Key[:0], agg.IntValue(uid))
			r.Vals = append(r.Vals[:0], agg.IntValue(1), agg.IntValue(p.amount))
			return nil
		})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobDone := make(chan error, 1)
	go func() { jobDone <- j.Run(ctx) }()

	// Tail every bucket's log: each +I/+U carries the row's max ts, the
	// creation time of the newest record folded in.
	var mu sync.Mutex
	var lat []float64
	var tails sync.WaitGroup
	for bucket := 0; bucket < 8; bucket++ {
		tails.Add(1)
		go func() {
			defer tails.Done()
			var next uint64
			for tbl.WaitLog(ctx, bucket, next) == nil {
				_ = tbl.ReadLog(bucket, next, func(e *aggmerge.Entry) error {
					next = e.Offset + 1
					if (e.Op == aggmerge.Insert || e.Op == aggmerge.UpdateAfter) && !e.After[1].IsNull() {
						d := float64(time.Now().UnixMicro()-e.After[1].Int()) / 1000
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					}
					return nil
				})
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // the job starts at the topic's end
	cl := kafkatest.Client(b, brokers, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(time.Millisecond))
	tick := time.NewTicker(10 * time.Millisecond)
	per := rate / 100
	for n := 0; n < rate*seconds; n += per {
		<-tick.C
		for k := 0; k < per; k++ {
			v := fmt.Appendf(nil, `{"user":"u%d","ts":%d}`, (n+k)%100_000, time.Now().UnixMicro())
			cl.Produce(ctx, &kgo.Record{Value: v}, nil)
		}
	}
	tick.Stop()
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	j.Stop()
	if err := <-jobDone; err != nil {
		b.Fatal(err)
	}
	cancel()
	tails.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		b.Fatal("no row change seen in the log")
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}

// BenchmarkDistinctKeys measures the process's peak resident memory while
// a job writes -distinct keys, one record each (a sequence source, no
// Kafka), into a table with sum, count and max per key: what the table's
// row cache, its dirty rows, pebble and the writer's combiner hold with
// more keys than fit in the cache (Options.CacheRows, 1M). peak-MiB is
// VmHWM, reset (/proc/self/clear_refs) before the job. Run with
// -benchtime 1x; -flush as in BenchmarkKafkaToTable (-1ns: at checkpoints).
func BenchmarkDistinctKeys(b *testing.B) {
	n := uint64(*benchDistinct)
	for range b.N {
		i64 := agg.Type{Kind: agg.KindInt64}
		tbl, err := aggmerge.Open(b.TempDir(), aggmerge.Schema{
			Key:     []aggmerge.Column{{Name: "k", Type: i64}},
			Values:  []aggmerge.Column{{Name: "total", Type: i64, Func: "sum"}, {Name: "n", Type: i64, Func: "count"}, {Name: "top", Type: i64, Func: "max"}},
			Buckets: 8,
		}, aggmerge.Options{})
		if err != nil {
			b.Fatal(err)
		}
		j := runtime.NewJob(runtime.Options{Name: "bench", DataDir: b.TempDir(), Parallelism: 2,
			Checkpoint: runtime.CheckpointOptions{Interval: time.Second}})
		events := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: n, Keys: n}))
		err = writer.To(events, "table", writer.Config{Table: tbl, FlushInterval: *benchFlush},
			func(e operators.Event, r *writer.Row) error {
				r.Key = append(r.Key[:0], agg.IntValue(int64(e.Key)))
				r.Vals = append(r.Vals[:0], agg.IntValue(e.Value), agg.IntValue(1), agg.IntValue(e.Value))
				return nil
			})
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			b.Skipf("cannot reset the peak RSS: %v", err)
		}
		cpu0 := cputime.Process()
		if err := j.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		cpu := cputime.Process() - cpu0
		peak := peakRSS(b)
		var rows, total int64
		_ = tbl.Scan(func(r aggmerge.Row) error { rows++; total += r.Values[1].Int(); return nil })
		if err := tbl.Close(); err != nil {
			b.Fatal(err)
		}
		if rows != int64(n) || total != int64(n) {
			b.Fatalf("%d rows counting %d records, want %d of one each", rows, total, n)
		}
		b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/rec")
	}
}

// peakRSS returns the process's resident high-water mark (VmHWM) in bytes.
func peakRSS(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}
