package kafkatest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
)

func TestBrokersFromEnvironment(t *testing.T) {
	t.Setenv(EnvBrokers, " 127.0.0.1:1 ,127.0.0.2:2,")
	if got, want := Brokers(t), []string{"127.0.0.1:1", "127.0.0.2:2"}; !slices.Equal(got, want) {
		t.Fatalf("Brokers() = %v, want %v", got, want)
	}
	if got := RequireReal(t); len(got) != 2 {
		t.Fatalf("RequireReal() = %v, want the 2 brokers", got)
	}
}

func TestBrokersEmbeddedWithoutEnvironment(t *testing.T) {
	t.Setenv(EnvBrokers, "")
	brokers := Brokers(t)
	topic := NewTopic(t, brokers, 2)
	if recs := ConsumeAll(t, brokers, topic); len(recs) != 0 {
		t.Fatalf("new topic holds %d records", len(recs))
	}
	Produce(t, brokers, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("x")})
	recs := ConsumeAll(t, brokers, topic)
	if len(recs) != 1 || recs[0].Partition != 1 || string(recs[0].Value) != "x" {
		t.Fatalf("consumed %v, want x on partition 1", recs)
	}
}

// TestTransactionVisibility checks what exactly-once rests on, against the
// embedded broker and, when one is given, the real one: read_committed sees
// committed and plain records, never aborted ones, and stops before an open
// transaction.
func TestTransactionVisibility(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		b, err := embedded.Start(embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		checkTransactionVisibility(t, b.Addrs())
	})
	t.Run("real", func(t *testing.T) {
		checkTransactionVisibility(t, RequireReal(t))
	})
}

func checkTransactionVisibility(t *testing.T, brokers []string) {
	const partitions, perPartition = 2, 5
	topic := NewTopic(t, brokers, partitions)
	records := func(prefix string) []*kgo.Record {
		var recs []*kgo.Record
		for p := range partitions {
			for i := range perPartition {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Value: fmt.Appendf(nil, "%s-p%d-%d", prefix, p, i)})
			}
		}
		return recs
	}
	txn := Client(t, brokers,
		kgo.TransactionalID(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	begin := func(prefix string) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatalf("begin %s: %v", prefix, err)
		}
		if err := txn.ProduceSync(timeoutContext(t), records(prefix)...).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", prefix, err)
		}
	}
	end := func(try kgo.TransactionEndTry) {
		t.Helper()
		if err := txn.EndTransaction(timeoutContext(t), try); err != nil {
			t.Fatalf("end transaction (commit %v): %v", try, err)
		}
	}

	begin("committed1")
	end(kgo.TryCommit)
	begin("aborted")
	end(kgo.TryAbort)
	Produce(t, brokers, records("plain")...)
	begin("committed2")
	end(kgo.TryCommit)
	begin("open") // left open: read_committed must stop before it

	var got []string
	for _, r := range ConsumeAll(t, brokers, topic) {
		got = append(got, string(r.Value))
	}
	var want []string
	for p := range partitions {
		for _, prefix := range []string{"committed1", "plain", "committed2"} {
			for i := range perPartition {
				want = append(want, fmt.Sprintf("%s-p%d-%d", prefix, p, i))
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed saw\n%s\nwant\n%s", strings.Join(got, " "), strings.Join(want, " "))
	}

	// The aborted and open records were written, only hidden: the high
	// watermark counts them.
	hwm, err := Admin(t, brokers).ListEndOffsets(timeoutContext(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(partitions) {
		o, _ := hwm.Lookup(topic, p)
		if written := int64(5 * perPartition); o.Offset < written {
			t.Errorf("partition %d: high watermark %d, want at least %d (all records incl. aborted and open)", p, o.Offset, written)
		}
	}
	end(kgo.TryAbort)
}
