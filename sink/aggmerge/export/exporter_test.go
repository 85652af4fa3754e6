package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

const testBuckets = 4

// openTable opens a table of every JSON-relevant type, deletes allowed.
func openTable(t testing.TB, dir string) *aggmerge.Table {
	t.Helper()
	tbl, err := aggmerge.Open(dir, aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "user", Type: agg.String}, {Name: "day", Type: agg.Int64}},
		Values: []aggmerge.Column{
			{Name: "total", Type: agg.Int64, Func: "sum"},
			{Name: "spent", Type: agg.Decimal(12, 2), Func: "sum"},
			{Name: "last", Type: agg.Timestamp, Func: "last_value"},
			{Name: "tags", Type: agg.StringSet, Func: "collect_set"},
		},
		Buckets: testBuckets,
		Delete:  aggmerge.DeleteAllow,
	}, aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}

// multiWriter writes random upserts and deletes as a registered writer
// of every column, with commit markers on every bucket at checkpoint.
type multiWriter struct {
	t      testing.TB
	tbl    *aggmerge.Table
	w      aggmerge.Writer
	rng    *rand.Rand
	commit []uint64
	ckpt   uint64
}

func newMultiWriter(t testing.TB, tbl *aggmerge.Table, seed int64) *multiWriter {
	epoch, err := tbl.Register("job", "job/sink#0", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &multiWriter{t: t, tbl: tbl, w: aggmerge.Writer{ID: "job/sink#0", Epoch: epoch}, rng: rand.New(rand.NewSource(seed)),
		commit: make([]uint64, testBuckets)}
}

func (m *multiWriter) batch(n int) {
	b, err := m.tbl.NewBatch(m.w, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	for range n {
		key := []agg.Value{agg.StringValue(fmt.Sprintf("u\"%d", m.rng.Intn(40))), agg.IntValue(int64(m.rng.Intn(3)))}
		if m.rng.Intn(8) == 0 {
			err = b.Delete(aggmerge.Aggregate, key, nil)
		} else {
			err = b.Upsert(aggmerge.Aggregate, key, []agg.Value{agg.IntValue(int64(m.rng.Intn(100))),
				agg.DecimalValue(decimalOf(m.rng.Intn(10000))), agg.MicrosValue(1_700_000_000_000_000 + m.rng.Int63n(1e12)),
				agg.SetValue(strconv.Itoa(m.rng.Intn(5)))})
		}
		if err != nil {
			m.t.Fatal(err)
		}
	}
	if _, err := m.tbl.Apply(b); err != nil {
		m.t.Fatal(err)
	}
}

func (m *multiWriter) checkpoint() {
	m.ckpt++
	ends := m.tbl.LogEnds()
	b, err := m.tbl.NewBatch(m.w, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	for bk, end := range ends {
		if end != m.commit[bk] {
			if err := b.Mark(bk, aggmerge.Marker{Kind: aggmerge.MarkerCommit, Checkpoint: m.ckpt, From: m.commit[bk], To: end}); err != nil {
				m.t.Fatal(err)
			}
			m.commit[bk] = end
		}
	}
	if _, err := m.tbl.Apply(b); err != nil {
		m.t.Fatal(err)
	}
}

// startExporter runs an exporter until the returned stop is called; stop
// returns Run's error.
func startExporter(t testing.TB, cfg Config) (x *Exporter, stop func() error) {
	t.Helper()
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	return x, func() error { cancel(); return <-done }
}

// waitExported waits until the exporter has passed every bucket's log end
// and a read_committed consumer sees all of it (see kafkatest.WaitStable).
func waitExported(t testing.TB, x *Exporter, tbl *aggmerge.Table) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Equal(x.Exported(), tbl.LogEnds()) {
		if time.Now().After(deadline) {
			t.Fatalf("not exported after 30s: at %v, log ends %v", x.Exported(), tbl.LogEnds())
		}
		time.Sleep(5 * time.Millisecond)
	}
	kafkatest.WaitStable(t, x.cfg.Kafka.Brokers, x.cfg.Topic)
}

// tableJSON is the table as the upsert-json format writes it.
func tableJSON(t testing.TB, tbl *aggmerge.Table) map[string]string {
	t.Helper()
	s := tbl.Schema()
	out := map[string]string{}
	err := tbl.Scan(func(r aggmerge.Row) error {
		out[string(appendKey(nil, &s, r.Key))] = string(appendRow(nil, &s, r.Key, r.Values))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// topicJSON reads the topic with the consumer helper.
func topicJSON(t testing.TB, brokers []string, topic string, f Format) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := ReadTable(ctx, ReaderConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: topic, Format: f})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, r := range rows {
		out[k] = r.String()
	}
	return out
}

func sameMaps(t testing.TB, got, want map[string]string) {
	t.Helper()
	bad := 0
	for k, w := range want {
		if got[k] != w {
			if bad < 3 {
				t.Errorf("key %s:\n got %s\nwant %s", k, got[k], w)
			}
			bad++
		}
	}
	if bad > 0 || len(got) != len(want) {
		t.Fatalf("%d rows differ; %d rows, want %d", bad, len(got), len(want))
	}
}

// exportedOffsets returns, per partition, the log offsets of the records
// in order (a Debezium delete's tombstone repeats its "d" record's offset
// and is left out), failing on a record without headers.
func exportedOffsets(t testing.TB, recs []*kgo.Record, f Format) map[int32][]uint64 {
	t.Helper()
	out := map[int32][]uint64{}
	for _, r := range recs {
		if f == DebeziumJSON && r.Value == nil {
			continue
		}
		off, ok := uintHeader(r, HeaderOffset)
		if !ok {
			t.Fatalf("record %d of partition %d has no offset header", r.Offset, r.Partition)
		}
		if b, _ := uintHeader(r, HeaderBucket); b != uint64(r.Partition) {
			t.Fatalf("record %d of partition %d has bucket header %d", r.Offset, r.Partition, b)
		}
		out[r.Partition] = append(out[r.Partition], off)
	}
	return out
}

// changeOffsets are the offsets an exporter of every entry writes: all
// but markers and the -U halves.
func changeOffsets(t testing.TB, tbl *aggmerge.Table) map[int32][]uint64 {
	t.Helper()
	out := map[int32][]uint64{}
	for b := range tbl.Schema().Buckets {
		err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
			if e.Op != aggmerge.MarkerEntry && e.Op != aggmerge.UpdateBefore {
				out[int32(b)] = append(out[int32(b)], e.Offset)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// foldedOffsets checks the log offsets of a committed-mode changelog: a
// subsequence of the change entries' offsets, rising in every partition
// (no change published twice). Committed mode folds a key's changes
// within a range into one, so not every entry has a record.
func foldedOffsets(t testing.TB, got, all map[int32][]uint64) {
	t.Helper()
	for p := range int32(testBuckets) {
		rest := all[p]
		for _, off := range got[p] {
			i := slices.Index(rest, off)
			if i < 0 {
				t.Fatalf("partition %d: log offset %d exported out of order, or not a change entry's (exported %v)", p, off, got[p])
			}
			rest = rest[i+1:]
		}
	}
}

func sameOffsets(t testing.TB, got, want map[int32][]uint64) {
	t.Helper()
	for p := range int32(testBuckets) {
		if !slices.Equal(got[p], want[p]) {
			t.Fatalf("partition %d: log offsets exported\n %v\nwant\n %v", p, got[p], want[p])
		}
	}
}

// TestExportEveryModeAndFormat writes while exporting, stops the exporter
// halfway and starts another: the topic holds every change once, in order,
// and reads back as the table.
func TestExportEveryModeAndFormat(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, mode := range []Mode{Committed, Uncommitted} {
		for _, f := range []Format{UpsertJSON, DebeziumJSON} {
			t.Run(string(mode)+"/"+string(f), func(t *testing.T) {
				tbl := openTable(t, t.TempDir())
				topic := kafkatest.NewTopic(t, brokers, testBuckets)
				cfg := Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}, Mode: mode, Format: f,
					MaxRecordsPerTxn: 50}
				w := newMultiWriter(t, tbl, 1)
				x, stop := startExporter(t, cfg)
				for i := range 40 {
					w.batch(10)
					if i%5 == 4 {
						w.checkpoint()
					}
					if i == 20 {
						w.checkpoint()
						waitExported(t, x, tbl)
						w.batch(10) // not yet exported when the exporter stops
						if err := stop(); err != nil {
							t.Fatal(err)
						}
						x, stop = startExporter(t, cfg)
					}
				}
				w.checkpoint()
				waitExported(t, x, tbl)
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				recs := kafkatest.ConsumeStable(t, brokers, topic)
				if mode == Committed {
					foldedOffsets(t, exportedOffsets(t, recs, f), changeOffsets(t, tbl))
				} else {
					sameOffsets(t, exportedOffsets(t, recs, f), changeOffsets(t, tbl))
				}
				if f == DebeziumJSON {
					kafkatest.ReplayChecked(t, recs) // every change starts from the row replayed so far
				}
				sameMaps(t, topicJSON(t, brokers, topic, f), tableJSON(t, tbl))
			})
		}
	}
}

func TestExportRefusesTopicWithOtherPartitionCount(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tbl := openTable(t, t.TempDir())
	topic := kafkatest.NewTopic(t, brokers, testBuckets+1)
	x, err := New(Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := x.Run(ctx); !errors.Is(err, ErrPartitions) {
		t.Fatalf("Run = %v, want ErrPartitions", err)
	}
}

// TestExportRefusesRecreatedTable: a topic filled from a table, then the
// table made anew under the same name, must not be continued silently.
func TestExportRefusesRecreatedTable(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, testBuckets)
	tbl := openTable(t, t.TempDir())
	w := newMultiWriter(t, tbl, 2)
	w.batch(20)
	cfg := Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}, Mode: Uncommitted}
	x, stop := startExporter(t, cfg)
	waitExported(t, x, tbl)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	cfg.Table = openTable(t, t.TempDir())
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := x.Run(ctx); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Run = %v, want ErrMismatch", err)
	}
}

// TestExportNewcomerFencesNobody: an exporter of another table (another
// data dir's table of the same name) given the same transactional id and
// the same topic as a running one refuses the topic at its start, naming
// both, before it loads the producer id: the running exporter is not
// fenced and goes on exporting.
func TestExportNewcomerFencesNobody(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, testBuckets)
	tbl := openTable(t, t.TempDir())
	w := newMultiWriter(t, tbl, 5)
	w.batch(20)
	cfg := Config{Table: tbl, Name: "orders", Topic: topic, Kafka: kafka.Connection{Brokers: brokers}, Mode: Uncommitted,
		TransactionalID: "ebbflow-test-" + topic}
	x, stop := startExporter(t, cfg)
	waitExported(t, x, tbl)

	newcomer := cfg
	newcomer.Table = openTable(t, t.TempDir())
	newcomer.Registerer = nil
	nx, err := New(newcomer)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = nx.Run(ctx)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tbl.ID().String()) || !strings.Contains(err.Error(), newcomer.Table.ID().String()) {
		t.Fatalf("newcomer: %v, want ErrMismatch naming both tables", err)
	}
	w.batch(20)
	waitExported(t, x, tbl)
	if err := stop(); err != nil {
		t.Fatalf("the running exporter: %v", err)
	}
	sameOffsets(t, exportedOffsets(t, kafkatest.ConsumeStable(t, brokers, topic), UpsertJSON), changeOffsets(t, tbl))
}

func decimalOf(cents int) decimal.Decimal { return decimal.New(int64(cents), -2) }

// TestExportZombieFenced: a second exporter of the same table (same
// transactional id) fences the first, which stops with ErrFenced instead
// of fighting back; the topic still holds every change once.
func TestExportZombieFenced(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tbl := openTable(t, t.TempDir())
	topic := kafkatest.NewTopic(t, brokers, testBuckets)
	cfg := Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}, Mode: Uncommitted, MaxRecordsPerTxn: 5}
	w := newMultiWriter(t, tbl, 4)
	w.batch(20)
	zcfg := cfg
	zcfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	zombie, err := New(zcfg)
	if err != nil {
		t.Fatal(err)
	}
	zctx, zcancel := context.WithCancel(context.Background())
	defer zcancel()
	zdone := make(chan error, 1)
	go func() { zdone <- zombie.Run(zctx) }()
	waitExported(t, zombie, tbl)

	x, stop := startExporter(t, cfg)
	waitExported(t, x, tbl)
	fenced := false
	for i := 0; !fenced; i++ {
		w.batch(5) // both try to export these
		select {
		case err := <-zdone:
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("zombie exporter: %v, want ErrFenced", err)
			}
			fenced = true
		case <-time.After(10 * time.Millisecond):
		}
		if i == 3000 {
			t.Fatal("the zombie exporter still runs 30 s after it was fenced")
		}
	}
	waitExported(t, x, tbl)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	sameOffsets(t, exportedOffsets(t, kafkatest.ConsumeStable(t, brokers, topic), UpsertJSON), changeOffsets(t, tbl))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestExportHoldsTheLog: the exporter's hold keeps log retention
// (Table.TruncateHeld, which the writer calls after its checkpoints) from
// dropping entries it has not exported, and lets it drop the rest.
func TestExportHoldsTheLog(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tbl := openTable(t, t.TempDir())
	topic := kafkatest.NewTopic(t, brokers, testBuckets)
	cfg := Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	w := newMultiWriter(t, tbl, 6)
	writerHoldsAll := func() {
		held := map[int]uint64{}
		for b, end := range tbl.LogEnds() {
			held[b] = end
		}
		if err := tbl.Hold(aggmerge.HolderOf(w.w.ID), held); err != nil {
			t.Fatal(err)
		}
	}
	x, stop := startExporter(t, cfg)
	for range 10 {
		w.batch(10) // not committed: the exporter cannot export them yet
	}
	writerHoldsAll() // only the exporter's hold, taken by New, keeps the log now
	if err := tbl.TruncateHeld(); err != nil {
		t.Fatal(err)
	}
	for b := range testBuckets {
		if start, _, _ := tbl.LogOffsets(b); start != 0 {
			t.Fatalf("bucket %d truncated below %d while nothing was exported", b, start)
		}
	}
	w.checkpoint()
	waitExported(t, x, tbl)
	writerHoldsAll()
	if err := tbl.TruncateHeld(); err != nil {
		t.Fatal(err)
	}
	truncated := 0
	for b := range testBuckets {
		if start, _, _ := tbl.LogOffsets(b); start > 0 {
			truncated++
		}
	}
	if truncated == 0 {
		t.Logf("retain %v exported %v ends %v", x.RetainFrom(), x.Exported(), tbl.LogEnds())
		t.Fatal("nothing truncated once everything was exported")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	w.batch(10)
	w.checkpoint()
	x, stop = startExporter(t, cfg) // resumes above the truncated start
	waitExported(t, x, tbl)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	sameMaps(t, topicJSON(t, brokers, topic, UpsertJSON), tableJSON(t, tbl))
}

// TestExportSharesATransactionAmongBuckets: when several buckets have
// entries to export, a transaction takes some of each, so that their
// partitions are produced to side by side, not one bucket after another.
func TestExportSharesATransactionAmongBuckets(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tbl := openTable(t, t.TempDir())
	m := newMultiWriter(t, tbl, 1)
	m.batch(400)
	m.checkpoint()
	topic := kafkatest.NewTopic(t, brokers, testBuckets)
	x, err := New(Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}, MaxRecordsPerTxn: 20})
	if err != nil {
		t.Fatal(err)
	}
	// The second transaction waits before its commit: Exported is then
	// where the first one left every bucket.
	second, release := make(chan struct{}), make(chan struct{})
	calls := 0
	x.failBeforeCommit = func(*Version) error {
		if calls++; calls == 2 {
			close(second)
			<-release
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	select {
	case <-second:
	case err := <-done:
		t.Fatalf("exporter stopped: %v", err)
	}
	first := x.Exported()
	close(release)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for b, off := range first {
		if off == 0 {
			t.Errorf("the first transaction exported nothing of bucket %d (exported: %v)", b, first)
		}
	}
}

// TestExportTakesWhatBucketsLeave: what a bucket leaves of its share of a
// transaction goes to the buckets that have more, so a round that can take
// everything pending does, in one transaction.
func TestExportTakesWhatBucketsLeave(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tbl := openTable(t, t.TempDir())
	m := newMultiWriter(t, tbl, 1)
	// 30 new keys in bucket 0, 2 in bucket 1: 32 inserts.
	b, err := tbl.NewBatch(m.w, nil)
	if err != nil {
		t.Fatal(err)
	}
	per := map[int]int{}
	for i := 0; per[0] < 30 || per[1] < 2; i++ {
		key := []agg.Value{agg.StringValue(fmt.Sprintf("k%d", i)), agg.IntValue(1)}
		k, err := tbl.EncodeKey(key)
		if err != nil {
			t.Fatal(err)
		}
		bk := aggmerge.BucketOf(k, testBuckets)
		if bk > 1 || (bk == 0 && per[0] == 30) || (bk == 1 && per[1] == 2) {
			continue
		}
		per[bk]++
		if err := b.Upsert(aggmerge.Aggregate, key, []agg.Value{agg.IntValue(1), agg.NullValue(), agg.NullValue(), agg.NullValue()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tbl.Apply(b); err != nil {
		t.Fatal(err)
	}
	m.checkpoint()
	topic := kafkatest.NewTopic(t, brokers, testBuckets)
	reg := prometheus.NewRegistry()
	x, stop := startExporter(t, Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers},
		MaxRecordsPerTxn: 40, NoVersions: true, Registerer: reg})
	waitExported(t, x, tbl)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n, recs := counter(t, reg, "ebbflow_export_transactions_total"), counter(t, reg, "ebbflow_export_records_total"); n != 1 || recs != 32 {
		t.Errorf("%v records in %v transactions, want 32 in one", recs, n)
	}
}
