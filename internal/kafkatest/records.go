package kafkatest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Produce writes recs synchronously, each to its Topic and Partition (the
// partitioner is manual, so a test knows where every record lands), and fails
// the test if any write fails.
func Produce(t testing.TB, brokers []string, recs ...*kgo.Record) {
	t.Helper()
	cl := Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(timeoutContext(t), recs...).FirstErr(); err != nil {
		t.Fatalf("kafkatest: produce: %v", err)
	}
}

// ConsumeStable is ConsumeAll once every transaction on topic is decided
// (WaitStable): what a writer that has stopped left, including its last
// commit, whose markers Kafka writes a moment after acknowledging it. Use
// ConsumeAll while writers run or a transaction is meant to stay open.
func ConsumeStable(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	WaitStable(t, brokers, topic)
	return ConsumeAll(t, brokers, topic)
}

// ConsumeAll reads every record of topic that is committed when it is
// called, read_committed: records of aborted transactions and transaction
// markers are left out, records of open transactions are not reached. The
// result is ordered by partition, then offset.
func ConsumeAll(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx := timeoutContext(t)
	adm := Admin(t, brokers)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: consume %q: list start offsets: %v", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: consume %q: list last stable offsets: %v", topic, err)
	}

	// next holds, per partition still to read, the offset read up to; a
	// partition is done when next reaches its end.
	end := make(map[int32]int64)
	next := make(map[int32]int64)
	from := make(map[int32]kgo.Offset)
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(topic, o.Partition)
		if start.Offset < o.Offset {
			end[o.Partition] = o.Offset
			next[o.Partition] = start.Offset
			from[o.Partition] = kgo.NewOffset().At(start.Offset)
		}
	})
	if len(from) == 0 {
		return nil
	}

	// Transaction markers are kept so that we see the position pass the
	// end even when a partition ends with an aborted transaction.
	cl := Client(t, brokers,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	var recs []*kgo.Record
	for len(next) > 0 {
		fetches := cl.PollFetches(ctx)
		if errs := fetches.Errors(); len(errs) > 0 {
			t.Fatalf("kafkatest: consume %q: partition %d: %v (still to read, partition: offset: %v, ends %v)",
				topic, errs[0].Partition, errs[0].Err, next, end)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if _, reading := next[r.Partition]; !reading || r.Offset >= end[r.Partition] {
				return
			}
			if !r.Attrs.IsControl() {
				recs = append(recs, r)
			}
			if next[r.Partition] = r.Offset + 1; next[r.Partition] >= end[r.Partition] {
				delete(next, r.Partition)
			}
		})
	}
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	return recs
}

// Replay materialises an ebbflow changelog (format upsert-json, or
// debezium-json with debezium set) from its records up to end offsets
// (per partition, the offset past the last record to apply; a partition
// without one applies nothing): record key → the row after the last change.
func Replay(t testing.TB, recs []*kgo.Record, ends []int64, debezium bool) map[string]map[string]any {
	t.Helper()
	rows := map[string]map[string]any{}
	for _, r := range recs {
		if int(r.Partition) >= len(ends) || r.Offset >= ends[r.Partition] || debezium && r.Value == nil {
			continue // past the ends, or the tombstone after a Debezium delete
		}
		var row map[string]any
		if r.Value != nil {
			if err := json.Unmarshal(r.Value, &row); err != nil {
				t.Fatalf("kafkatest: replay %s/%d offset %d: %v", r.Topic, r.Partition, r.Offset, err)
			}
		}
		if debezium {
			row, _ = row["after"].(map[string]any)
		}
		if row == nil {
			delete(rows, string(r.Key))
			continue
		}
		rows[string(r.Key)] = row
	}
	return rows
}

// ReplayChecked is Replay of a whole debezium-json changelog (recs in
// order per partition) that also checks every change against the rows
// replayed so far: a "c" must find no row of its key, a "u" or "d" must
// carry that row as its "before". A changelog that shows a value which was
// never its row's (an undone write, a change published twice or lost)
// fails the test, naming the record. Numbers are json.Numbers.
func ReplayChecked(t testing.TB, recs []*kgo.Record) map[string]map[string]any {
	t.Helper()
	rows := map[string]map[string]any{}
	for _, r := range recs {
		if r.Value == nil {
			continue // the tombstone after a delete
		}
		var c struct {
			Op            string
			Before, After map[string]any
		}
		dec := json.NewDecoder(bytes.NewReader(r.Value))
		dec.UseNumber()
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("kafkatest: replay %s/%d offset %d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		row, had := rows[string(r.Key)]
		switch {
		case c.Op == "c" && had:
			t.Fatalf("kafkatest: replay %s/%d offset %d: key %s created, but it has the row %v", r.Topic, r.Partition, r.Offset, r.Key, row)
		case c.Op != "c" && (!had || !reflect.DeepEqual(c.Before, row)):
			t.Fatalf("kafkatest: replay %s/%d offset %d: key %s %q from %v, but its row is %v", r.Topic, r.Partition, r.Offset, r.Key, c.Op, c.Before, row)
		}
		if c.After == nil {
			delete(rows, string(r.Key))
		} else {
			rows[string(r.Key)] = c.After
		}
	}
	return rows
}
