package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// topicSeq tells apart topics made by one test.
var topicSeq atomic.Uint64

// illegalTopicChars matches what Kafka does not allow in a topic name.
var illegalTopicChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// CreateTopic creates topic with the given number of partitions and
// replication factor 1, and waits until every partition has a leader.
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int) {
	t.Helper()
	ctx := timeoutContext(t)
	adm := Admin(t, brokers)
	if _, err := adm.CreateTopic(ctx, int32(partitions), 1, nil, topic); err != nil {
		t.Fatalf("kafkatest: create topic %q: %v", topic, err)
	}
	// Real Kafka answers CreateTopics before every partition has a leader;
	// wait so that the test's first produce or list does not race that.
	for !ready(ctx, adm, topic, partitions) {
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: topic %q: partitions without leader: %v", topic, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ready reports whether topic has its partitions, each with a leader.
func ready(ctx context.Context, adm *kadm.Client, topic string, partitions int) bool {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil || details.Error() != nil {
		return false
	}
	ps := details[topic].Partitions
	if len(ps) != partitions {
		return false
	}
	for _, p := range ps {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// NewTopic creates a topic with a name unique to this test run and deletes
// it when the test ends. It returns the name.
func NewTopic(t testing.TB, brokers []string, partitions int) string {
	t.Helper()
	name := TopicName(t, brokers)
	CreateTopic(t, brokers, name, partitions)
	return name
}

// TopicName returns a topic name unique to this test run that no topic has
// yet, for a test where the code under test creates it; a topic of that
// name is deleted when the test ends.
func TopicName(t testing.TB, brokers []string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", illegalTopicChars.ReplaceAllString(t.Name(), "_"), time.Now().UnixNano(), topicSeq.Add(1))
	if len(name) > 200 {
		name = name[len(name)-200:]
	}
	t.Cleanup(func() { deleteTopic(t, brokers, name) })
	return name
}

// deleteTopic deletes topic at the end of a test. The test's context is
// already cancelled then, and a failure only leaves a topic behind.
func deleteTopic(t testing.TB, brokers []string, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Logf("kafkatest: delete topic %q: %v", topic, err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopic(ctx, topic); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Logf("kafkatest: delete topic %q: %v", topic, err)
	}
}

// WaitStable waits until no partition of topic holds a record whose
// transaction is undecided, to a read_committed consumer: every last stable
// offset has reached its high watermark. Kafka acknowledges a commit once
// its coordinator has logged it, and writes the markers that make the
// records visible a moment later; until then the partition's last stable
// offset stays at the transaction's first record, and a read "to the end"
// (kcat -e, ReadTable, kafkatest.ConsumeAll) stops there.
func WaitStable(t testing.TB, brokers []string, topic string) {
	t.Helper()
	adm := Admin(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// High watermarks first: a last stable offset listed after them
		// that has reached them covers every record they count.
		hw, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hw.Error()
		}
		var lso kadm.ListedOffsets
		if err == nil {
			lso, err = adm.ListCommittedOffsets(ctx, topic)
		}
		if err == nil {
			err = lso.Error()
		}
		var undecided []string
		hw.Each(func(h kadm.ListedOffset) {
			if l, ok := lso.Lookup(topic, h.Partition); !ok || l.Offset < h.Offset {
				undecided = append(undecided, fmt.Sprintf("partition %d: last stable offset %d, high watermark %d", h.Partition, l.Offset, h.Offset))
			}
		})
		if err == nil && len(undecided) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %q: transactions still undecided after 30s: %v (err %v)", topic, undecided, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// EndOffsets sums the end offsets of topic's partitions, records and
// transaction markers alike (0 before the topic exists): it grows whenever
// anything is written to the topic.
func EndOffsets(t testing.TB, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(timeoutContext(t), topic)
	if err != nil {
		t.Fatalf("kafkatest: end offsets of %q: %v", topic, err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += max(o.Offset, 0) })
	return n
}
