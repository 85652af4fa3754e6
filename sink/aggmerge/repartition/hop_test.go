package repartition

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
)

const (
	hopBuckets    = 8
	hopPartitions = 4
	hopInputParts = 2
)

// hop is the Kafka side of a hop test: an input topic, a repartition
// topic and a group.
type hop struct {
	brokers      []string
	input, topic string
	group, txnID string
}

func newHop(t *testing.T) hop {
	brokers := kafkatest.Brokers(t)
	h := hop{brokers: brokers, input: kafkatest.NewTopic(t, brokers, hopInputParts), topic: kafkatest.TopicName(t, brokers)}
	h.group, h.txnID = h.topic+"-group", h.topic+"-txn"
	return h
}

// produceInput writes seqs [from, to) to the input, seq on partition seq
// mod hopInputParts, value the seq.
func (h hop) produceInput(t *testing.T, from, to int) {
	var recs []*kgo.Record
	for seq := from; seq < to; seq++ {
		recs = append(recs, &kgo.Record{Topic: h.input, Partition: int32(seq % hopInputParts), Value: []byte(strconv.Itoa(seq))})
	}
	kafkatest.Produce(t, h.brokers, recs...)
}

func (h hop) writer(t *testing.T) *Writer {
	ctx, cancel := context.WithTimeout(t.Context(), kafkatest.Timeout)
	defer cancel()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(ctx, WriterConfig{Kafka: kafka.Connection{Brokers: h.brokers}, Group: h.group,
		Input: []string{h.input}, Topic: h.topic, Partitions: hopPartitions, Buckets: hopBuckets, TransactionalID: h.txnID, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// pollSend polls w until it has n input records, and sends for each the
// partial row "<tag>:<seq>" keyed by the seq. It fails on a record beyond
// n or out of order within its partition, and returns the seqs polled.
func pollSend(t *testing.T, w *Writer, n int, tag string) []int {
	ctx, cancel := context.WithTimeout(t.Context(), kafkatest.Timeout)
	defer cancel()
	var seqs []int
	for len(seqs) < n {
		recs, err := w.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("polled %d input records of %d: %v", len(seqs), n, ctx.Err())
		}
		for _, r := range recs {
			seq, _ := strconv.Atoi(string(r.Value))
			seqs = append(seqs, seq)
			w.Send([]byte(strconv.Itoa(seq)), []byte(tag+":"+strconv.Itoa(seq)))
		}
	}
	if len(seqs) > n {
		t.Fatalf("polled %d input records, want %d: %v", len(seqs), n, seqs)
	}
	return seqs
}

// counts returns a writer's rows sent and transactions committed and
// aborted.
func counts(w *Writer) [3]float64 {
	m := w.cfg.Metrics
	var out [3]float64
	for i, c := range []prometheus.Counter{m.sent, m.committed, m.aborted} {
		var d dto.Metric
		if err := c.Write(&d); err == nil {
			out[i] = d.GetCounter().GetValue()
		}
	}
	return out
}

// committedOffsets sums the group's committed offsets over the input. It
// asks for stable offsets: Kafka writes a committed transaction's offsets
// to the group a moment after acknowledging the commit (as it does its
// markers, see kafkatest.WaitStable), and answers with the older ones
// until then unless asked to wait.
func (h hop) committedOffsets(t *testing.T) int64 {
	ctx, cancel := context.WithTimeout(t.Context(), kafkatest.Timeout)
	defer cancel()
	resp, err := kafkatest.Admin(t, h.brokers).FetchOffsets(kadm.RequireStable(ctx), h.group)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", h.group, err)
	}
	var sum int64
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == h.input {
			sum += o.At
		}
	})
	return sum
}

// readSettled is read once every transaction on the repartition topic is
// decided: after a commit, whose markers Kafka writes a moment after
// acknowledging it.
func (h hop) readSettled(t *testing.T) []string {
	kafkatest.WaitStable(t, h.brokers, h.topic)
	return h.read(t)
}

// read returns what a read_committed consumer reads of the repartition
// topic: tag:seq values, each checked to sit in the partition of its key's
// bucket.
func (h hop) read(t *testing.T) []string {
	var got []string
	for _, r := range kafkatest.ConsumeAll(t, h.brokers, h.topic) {
		if want := int32(base.Owner(base.BucketOf(r.Key, hopBuckets), hopPartitions)); r.Partition != want {
			t.Errorf("key %q in partition %d, its bucket's partition is %d", r.Key, r.Partition, want)
		}
		if !strings.HasSuffix(string(r.Value), ":"+string(r.Key)) {
			t.Errorf("record %q under key %q", r.Value, r.Key)
		}
		got = append(got, string(r.Value))
	}
	return got
}

// wantExactly fails unless got holds each of want once and nothing else.
func wantExactly(t *testing.T, got []string, want func(seq int) string, n int) {
	t.Helper()
	count := make(map[string]int)
	for _, v := range got {
		count[v]++
	}
	for seq := range n {
		if v := want(seq); count[v] != 1 {
			t.Errorf("%q read %d times, want once", v, count[v])
		}
		delete(count, want(seq))
	}
	for v, c := range count {
		t.Errorf("%q read %d times, want never", v, c)
	}
}

// stuck reports whether a partition of the repartition topic has records
// that read_committed consumers cannot reach yet: an open transaction.
func (h hop) stuck(t *testing.T) bool {
	ctx, cancel := context.WithTimeout(t.Context(), kafkatest.Timeout)
	defer cancel()
	adm := kafkatest.Admin(t, h.brokers)
	hw, err := adm.ListEndOffsets(ctx, h.topic)
	if err != nil {
		t.Fatal(err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, h.topic)
	if err != nil {
		t.Fatal(err)
	}
	open := false
	hw.Each(func(o kadm.ListedOffset) {
		if l, _ := lso.Lookup(h.topic, o.Partition); l.Offset < o.Offset {
			open = true
		}
	})
	return open
}

// TestHopFencedZombie: a writer commits checkpoint 1, sends more rows in
// its next transaction and is replaced, while still alive, by a new
// incarnation with the same transactional id (a restarted instance). The
// zombie's open transaction is aborted and its commit refused; nothing of
// it is ever read, and the group's offsets stay at checkpoint 1 until the
// new incarnation commits the same input again: every input record is read
// exactly once, from the incarnation that committed it.
func TestHopFencedZombie(t *testing.T) {
	h := newHop(t)
	h.produceInput(t, 0, 50)
	a := h.writer(t)
	pollSend(t, a, 50, "a")
	if ok, err := a.Checkpoint(t.Context()); !ok || err != nil {
		t.Fatalf("checkpoint 1: committed %v, %v", ok, err)
	}
	h.produceInput(t, 50, 100)
	pollSend(t, a, 50, "zombie")
	if err := a.sess.Client().Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !h.stuck(t) {
		t.Fatal("the zombie's rows are not in an open transaction")
	}

	b := h.writer(t) // fences a: the broker aborts its open transaction
	if ok, err := a.Checkpoint(t.Context()); ok {
		t.Fatalf("the fenced zombie committed (err %v)", err)
	} else {
		t.Logf("the zombie's commit: %v", err)
	}
	a.sess.Close()
	wantExactly(t, h.readSettled(t), func(seq int) string { return fmt.Sprintf("a:%d", seq) }, 50)
	if got := h.committedOffsets(t); got != 50 {
		t.Fatalf("group offsets at %d after the aborted transaction, want 50", got)
	}

	seqs := pollSend(t, b, 50, "b")
	for _, s := range seqs {
		if s < 50 {
			t.Fatalf("the new incarnation polled %d, committed by checkpoint 1", s)
		}
	}
	if ok, err := b.Checkpoint(t.Context()); !ok || err != nil {
		t.Fatalf("checkpoint 2: committed %v, %v", ok, err)
	}
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := counts(a); got != [3]float64{100, 1, 1} {
		t.Errorf("the zombie's rows sent, committed, aborted: %v, want 100 1 1", got)
	}
	if got := counts(b); got != [3]float64{50, 1, 0} {
		t.Errorf("the new incarnation's rows sent, committed, aborted: %v, want 50 1 0", got)
	}
	wantExactly(t, h.readSettled(t), func(seq int) string {
		if seq < 50 {
			return fmt.Sprintf("a:%d", seq)
		}
		return fmt.Sprintf("b:%d", seq)
	}, 100)
	if got := h.committedOffsets(t); got != 100 {
		t.Fatalf("group offsets at %d, want 100", got)
	}
}

// TestHopKilledMidTransaction: a writer dies (its client goes away without
// ending its transaction) after sending rows that no checkpoint covered.
// They stay unreadable, the offsets do not move, and the restarted
// incarnation sends the same input again, which is then read once.
func TestHopKilledMidTransaction(t *testing.T) {
	h := newHop(t)
	h.produceInput(t, 0, 60)
	a := h.writer(t)
	pollSend(t, a, 60, "a")
	if ok, err := a.Checkpoint(t.Context()); !ok || err != nil {
		t.Fatalf("checkpoint 1: committed %v, %v", ok, err)
	}
	h.produceInput(t, 60, 90)
	pollSend(t, a, 30, "dead")
	if err := a.sess.Client().Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	a.sess.Close() // no End: the transaction stays open on the broker
	if !h.stuck(t) {
		t.Fatal("the dead writer's rows are not in an open transaction")
	}
	if got := h.committedOffsets(t); got != 60 {
		t.Fatalf("group offsets at %d after the kill, want 60", got)
	}

	b := h.writer(t)
	if got := h.read(t); len(got) != 60 {
		t.Fatalf("read %d records after the restart, want the 60 of checkpoint 1", len(got))
	}
	h.produceInput(t, 90, 100)
	pollSend(t, b, 40, "b")
	stop, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if ok, err := b.Checkpoint(stop); !ok || err != nil {
		t.Fatalf("checkpoint 2: committed %v, %v", ok, err)
	}
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantExactly(t, h.readSettled(t), func(seq int) string {
		if seq < 60 {
			return fmt.Sprintf("a:%d", seq)
		}
		return fmt.Sprintf("b:%d", seq)
	}, 100)
}

// TestHopRefusesOtherPartitionCount: a repartition topic with another
// partition count than configured is refused, naming both.
func TestHopRefusesOtherPartitionCount(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	_, err := NewWriter(t.Context(), WriterConfig{Kafka: kafka.Connection{Brokers: brokers}, Group: topic,
		Input: []string{topic}, Topic: topic, Partitions: 4, Buckets: 8, TransactionalID: topic})
	if err == nil || !strings.Contains(err.Error(), "has 3 partitions, want 4") {
		t.Fatalf("err = %v, want the partition counts named", err)
	}
}
