package export

import (
	"context"
	"flag"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/cputime"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

var (
	benchEntries = flag.Int("export.entries", 1_000_000, "writes BenchmarkExport preloads")
	benchRate    = flag.Int("export.rate", 5_000, "writes per second in BenchmarkVisibility")
	benchFor     = flag.Duration("export.for", 5*time.Second, "how long BenchmarkVisibility writes")
	benchCkpt    = flag.Duration("export.checkpoint", time.Second, "commit marker interval in BenchmarkVisibility")
	benchTxn     = flag.Int("export.txn", 0, "BenchmarkExport's MaxRecordsPerTxn (0: the default)")
	benchUsers   = flag.Int("export.users", 10_000, "keys BenchmarkExport's writes go to: committed mode folds a key's writes within a range, so as many keys as writes measure one record per write")
	benchCodec   = flag.String("export.compression", "", "BenchmarkExport's batch compression (none, snappy, lz4, zstd; empty: the exporter's default)")
)

// benchConnection is the connection BenchmarkExport exports with, its
// compression that of -export.compression.
func benchConnection(b *testing.B, brokers []string) kafka.Connection {
	conn := kafka.Connection{Brokers: brokers}
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	switch c, ok := codecs[*benchCodec]; {
	case ok:
		conn.ClientOptions = []kgo.Opt{kgo.ProducerBatchCompression(c)}
	case *benchCodec != "":
		b.Fatalf("-export.compression %q: want none, snappy, lz4 or zstd", *benchCodec)
	}
	return conn
}

func benchSchema() aggmerge.Schema {
	return aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "user", Type: agg.Int64}},
		Values: []aggmerge.Column{
			{Name: "total", Type: agg.Int64, Func: "sum"},
			{Name: "n", Type: agg.Int64, Func: "count"},
			{Name: "written_us", Type: agg.Int64, Func: "last_value"},
		},
		Buckets: 4,
	}
}

// benchWriter writes as a registered writer "bench/sink#0" and marks every
// bucket committed on checkpoint.
type benchWriter struct {
	tbl    *aggmerge.Table
	w      aggmerge.Writer
	b      *aggmerge.Batch
	commit []uint64
	ckpt   uint64
	i      int
	users  int // keys written over (-export.users)
}

func newBenchWriter(b *testing.B, tbl *aggmerge.Table) *benchWriter {
	epoch, err := tbl.Register("bench", "bench/sink#0", nil)
	if err != nil {
		b.Fatal(err)
	}
	batch, err := tbl.NewBatch(aggmerge.Writer{ID: "bench/sink#0", Epoch: epoch}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return &benchWriter{tbl: tbl, w: aggmerge.Writer{ID: "bench/sink#0", Epoch: epoch}, b: batch, commit: make([]uint64, tbl.Schema().Buckets), users: *benchUsers}
}

// write applies n writes over w.users users, stamped with the current time.
func (w *benchWriter) write(b *testing.B, n int) {
	now := agg.IntValue(time.Now().UnixMicro())
	for range n {
		w.i++
		if err := w.b.Upsert(aggmerge.Aggregate, []agg.Value{agg.IntValue(int64(w.i * 7919 % w.users))},
			[]agg.Value{agg.IntValue(int64(w.i % 100)), agg.IntValue(1), now}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.tbl.Apply(w.b); err != nil {
		b.Fatal(err)
	}
	w.b.Reset()
}

// checkpoint syncs, appends a commit marker per bucket and records the
// checkpoint, as the writer does when a checkpoint completes (a version
// is then due).
func (w *benchWriter) checkpoint(b *testing.B) {
	if err := w.tbl.Sync(); err != nil {
		b.Fatal(err)
	}
	w.ckpt++
	for bk, end := range w.tbl.LogEnds() {
		if end != w.commit[bk] {
			if err := w.b.Mark(bk, aggmerge.Marker{Kind: aggmerge.MarkerCommit, Checkpoint: w.ckpt, From: w.commit[bk], To: end}); err != nil {
				b.Fatal(err)
			}
			w.commit[bk] = end
		}
	}
	if _, err := w.tbl.Apply(w.b); err != nil {
		b.Fatal(err)
	}
	w.b.Reset()
	if err := w.tbl.RecordCheckpoint(w.w, w.ckpt, 0); err != nil {
		b.Fatal(err)
	}
}

// benchVariant is a mode of the exporter, with or without versions.
type benchVariant struct {
	name       string
	mode       Mode
	noVersions bool
}

// benchVariants: committed with versions (the default), committed without
// (what publishing versions costs), uncommitted.
var benchVariants = []benchVariant{
	{"committed", Committed, false}, {"committed-no-versions", Committed, true}, {"uncommitted", Uncommitted, false},
}

// check fails the benchmark when the variant should have published a
// version and did not (or the other way round).
func (v benchVariant) check(b *testing.B, x *Exporter) {
	want := v.mode == Committed && !v.noVersions
	if _, got := x.LastVersion(); got != want {
		b.Fatalf("%s: a version published: %v, want %v", v.name, got, want)
	}
}

// BenchmarkExport measures export throughput: a table preloaded with
// -export.entries writes (each an update of two entries after the first
// write of a key, a commit marker per bucket every 1000 writes) exported
// from scratch until caught up. entries/s counts log entries passed, rec/s
// records produced, both from Run's start (the producer's start-up, topic
// lookups and resume included); start-ms is the time to the first commit,
// steady-rec/s the records per second after it (the first transaction's
// records included), cpu-µs/rec the process's CPU per record produced
// (with the embedded broker, its CPU too). -export.compression and
// -export.txn set the producer's compression and MaxRecordsPerTxn.
//
//	go test -run XXX -bench Export -benchtime 3x ./sink/aggmerge/export/
func BenchmarkExport(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	tbl, err := aggmerge.Open(b.TempDir(), benchSchema(), aggmerge.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tbl.Close()
	w := newBenchWriter(b, tbl)
	for range *benchEntries / 1000 {
		w.write(b, 1000)
		w.checkpoint(b)
	}
	// A scan stores the rows written: the table's storer does not run
	// beside the exports measured.
	if err := tbl.Scan(func(aggmerge.Row) error { return errStop }); err != errStop {
		b.Fatal(err)
	}
	var entries uint64
	for _, e := range tbl.LogEnds() {
		entries += e
	}
	for _, v := range benchVariants {
		b.Run(v.name, func(b *testing.B) {
			var records float64
			var cpu, start time.Duration
			for b.Loop() {
				topic := kafkatest.NewTopic(b, brokers, tbl.Schema().Buckets)
				reg := prometheus.NewRegistry()
				x, err := New(Config{Table: tbl, Name: topic, Topic: topic, Kafka: benchConnection(b, brokers), Mode: v.mode,
					NoVersions: v.noVersions, MaxRecordsPerTxn: *benchTxn, Registerer: reg})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				t0, cpu0 := time.Now(), cputime.Process()
				go func() { done <- x.Run(ctx) }()
				var first time.Time
				for !slices.Equal(x.Exported(), tbl.LogEnds()) {
					if first.IsZero() && !x.LastCommit().IsZero() {
						first = time.Now()
					}
					time.Sleep(time.Millisecond)
				}
				if first.IsZero() { // one transaction did it all
					first = time.Now()
				}
				cpu += cputime.Process() - cpu0
				start += first.Sub(t0)
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				v.check(b, x)
				records += counter(b, reg, "ebbflow_export_records_total")
			}
			b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			b.ReportMetric(records/b.Elapsed().Seconds(), "rec/s")
			b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "start-ms")
			b.ReportMetric(records/(b.Elapsed()-start).Seconds(), "steady-rec/s")
			b.ReportMetric(float64(cpu.Microseconds())/records, "cpu-µs/rec")
		})
	}
}

// BenchmarkVisibility measures the latency from a table write to its
// record reaching a read_committed consumer: writes at -export.rate per
// second for -export.for, a commit marker per bucket every
// -export.checkpoint (committed mode waits for it).
//
//	go test -run XXX -bench Visibility -benchtime 1x ./sink/aggmerge/export/
func BenchmarkVisibility(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	for _, v := range benchVariants {
		b.Run(v.name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				lat = append(lat, visibility(b, brokers, v)...)
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(q(1), "max-ms")
			b.ReportMetric(float64(len(lat)), "records")
		})
	}
}

func visibility(b *testing.B, brokers []string, v benchVariant) []time.Duration {
	tbl, err := aggmerge.Open(b.TempDir(), benchSchema(), aggmerge.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tbl.Close()
	topic := kafkatest.NewTopic(b, brokers, tbl.Schema().Buckets)
	x, err := New(Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}, Mode: v.mode,
		NoVersions: v.noVersions, CheckpointInterval: *benchCkpt})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Warm up: the exporter has started and exported a first write, so the
	// figures do not include its start.
	w := newBenchWriter(b, tbl)
	w.write(b, 1)
	w.checkpoint(b)
	for !slices.Equal(x.Exported(), tbl.LogEnds()) {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()

	cl := kafkatest.Client(b, brokers, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	var lat []time.Duration
	got := make(chan []time.Duration, 1)
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	go func() {
		var l []time.Duration
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				if us, ok := writtenAt(r.Value); ok && us >= start.UnixMicro() {
					l = append(l, now.Sub(time.UnixMicro(us)))
				}
			})
		}
		got <- l
	}()

	const tick = 10 * time.Millisecond
	perTick := max(1, *benchRate*int(tick)/int(time.Second))
	lastCkpt := start
	for time.Since(start) < *benchFor {
		w.write(b, perTick)
		if time.Since(lastCkpt) >= *benchCkpt {
			w.checkpoint(b)
			lastCkpt = time.Now()
		}
		time.Sleep(tick)
	}
	w.checkpoint(b)
	for !slices.Equal(x.Exported(), tbl.LogEnds()) {
		time.Sleep(time.Millisecond)
	}
	v.check(b, x)
	time.Sleep(200 * time.Millisecond) // let the consumer catch up
	ccancel()
	lat = <-got
	if len(lat) == 0 {
		b.Fatal("no record consumed")
	}
	return lat
}

// writtenAt extracts written_us from an upsert-json value.
func writtenAt(v []byte) (int64, bool) {
	s := string(v)
	i := strings.Index(s, `"written_us":`)
	if i < 0 {
		return 0, false
	}
	s = s[i+len(`"written_us":`):]
	j := strings.IndexAny(s, ",}")
	us, err := strconv.ParseInt(s[:j], 10, 64)
	return us, err == nil
}

// counter reads a counter from a registry.
func counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// BenchmarkRowsAt times Exporter.RowsAt, the hosting runner's read of a
// table at a version (the fast path of a consistent snapshot), and every
// row of it made (Rows.Each): a table of 100k rows (one write each), its
// newest version, the rows as of it.
//
//	go test -run XXX -bench RowsAt -benchtime 20x ./sink/aggmerge/export/
func BenchmarkRowsAt(b *testing.B) {
	const rows = 100_000
	brokers := kafkatest.Brokers(b)
	tbl, err := aggmerge.Open(b.TempDir(), benchSchema(), aggmerge.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tbl.Close()
	w := newBenchWriter(b, tbl)
	w.users = rows
	for range rows / 1000 {
		w.write(b, 1000)
	}
	w.checkpoint(b)
	topic := kafkatest.NewTopic(b, brokers, tbl.Schema().Buckets)
	x, err := New(Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var v Version
	for ok := false; !ok; _ = ok {
		if v, ok = x.LastVersion(); !ok {
			time.Sleep(10 * time.Millisecond)
		}
	}
	cpu0 := cputime.Process()
	for b.Loop() {
		got, ok, err := x.RowsAt(&v)
		n := 0
		if err == nil {
			err = got.Each(func(string, kafka.Row) error { n++; return nil })
		}
		if err != nil || !ok || n != rows || got.Len() != rows {
			b.Fatalf("rows at version %d: %d rows (Len %d), %v, %v; want %d", v.Version, n, got.Len(), ok, err, rows)
		}
	}
	b.ReportMetric(float64((cputime.Process()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
