package export

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// TestReadBothFormatsAlike exports one table to an upsert-json and a
// debezium-json topic: Read must give the same +I/-U/+U/-D changes from
// both (the upsert ones derived by the Normalizer), as many as the log
// has entries, and Follow must deliver changes written after it started.
func TestReadBothFormatsAlike(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tbl := openTable(t, t.TempDir())
	w := newMultiWriter(t, tbl, 5)
	var topics []string
	for _, f := range []Format{UpsertJSON, DebeziumJSON} {
		topic := kafkatest.NewTopic(t, brokers, testBuckets)
		topics = append(topics, topic)
		_, stop := startExporter(t, Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}, Format: f, Mode: Uncommitted})
		defer func() {
			if err := stop(); err != nil {
				t.Error(err)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fctx, stopReading := context.WithCancel(ctx)
	var mu sync.Mutex
	var got [2][]string
	done := make(chan error, 2)
	for i, f := range []Format{UpsertJSON, DebeziumJSON} {
		go func() {
			done <- Read(fctx, ReaderConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: topics[i], Format: f, Follow: true},
				func(c Change) error {
					mu.Lock()
					defer mu.Unlock()
					got[i] = append(got[i], fmt.Sprintf("%d %d %s %s %s", c.Bucket, c.LogOffset, c.Kind, c.RawKey, c.Row))
					return nil
				})
		}()
	}
	for range 20 { // written while Read follows
		w.batch(10)
	}
	// One change per change entry, and a -U per update.
	want := 0
	for b := range testBuckets {
		err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
			if e.Op != aggmerge.MarkerEntry {
				want++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for {
		mu.Lock()
		n0, n1 := len(got[0]), len(got[1])
		mu.Unlock()
		if n0 >= want && n1 >= want {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d and %d changes, want %d", n0, n1, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopReading()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Partitions interleave at random: compare each partition's order.
	for i := range got {
		slices.SortStableFunc(got[i], func(a, b string) int {
			return strings.Compare(a[:strings.IndexByte(a, ' ')], b[:strings.IndexByte(b, ' ')])
		})
	}
	if !slices.Equal(got[0], got[1]) {
		t.Fatalf("upsert-json and debezium-json read differently:\n%s\n--\n%s", strings.Join(got[0], "\n"), strings.Join(got[1], "\n"))
	}
	if len(got[0]) != want {
		t.Fatalf("read %d changes, want %d", len(got[0]), want)
	}
}

// TestReadUntilWaitsForItsTransaction reads a changelog up to offsets
// whose records are written but whose transaction is not decided yet to a
// read_committed reader: as after a version became visible, in its
// versions topic, before the markers of its transaction reached every
// changelog partition (Kafka writes them one partition at a time; seen on
// a real broker, where a snapshot failed with "partition 2 ends at offset
// 51, before the offset 240 to read to (the topic was recreated?)"). Read
// must wait for the transaction and read the records once it commits, not
// fail; Until past the records written is still an error at once.
func TestReadUntilWaitsForItsTransaction(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	txn := kafkatest.Client(t, brokers, kgo.TransactionalID(topic), kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range 3 {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, `{"k":"k%d"}`, i), Value: fmt.Appendf(nil, `{"k":"k%d","n":%d}`, i, i)})
	}
	if err := txn.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg := ReaderConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: topic, Until: []int64{3}}
	if _, err := ReadTable(ctx, ReaderConfig{Kafka: cfg.Kafka, Topic: topic, Until: []int64{4}}); err == nil || !strings.Contains(err.Error(), "before the offset 4 to read to") {
		t.Fatalf("read to offset 4 of 3 records: %v; want an error at once", err)
	}
	type result struct {
		rows map[string]kafka.Row
		err  error
	}
	read := make(chan result, 1)
	go func() {
		rows, err := ReadTable(ctx, cfg)
		read <- result{rows, err}
	}()
	select {
	case r := <-read:
		t.Fatalf("read to offset 3 before the transaction was decided: %v, %v; want it to wait", r.rows, r.err)
	case <-time.After(200 * time.Millisecond): // it waits (or has not begun: the commit then comes first)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	r := <-read
	if r.err != nil || len(r.rows) != 3 {
		t.Fatalf("read to offset 3 once committed: %v, %v; want the 3 rows", r.rows, r.err)
	}
}
