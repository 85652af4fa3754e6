package export

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
