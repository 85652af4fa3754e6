package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/runtime"
)

// Headers added to a dead-lettered record, after its own.
const (
	HeaderError     = "ebbflow.error"
	HeaderTopic     = "ebbflow.source.topic"
	HeaderPartition = "ebbflow.source.partition"
	HeaderOffset    = "ebbflow.source.offset"
)

// ErrTopicNotAllowed marks a topic that does not exist and that the client
// may not create (no CREATE permission, or a broker policy refuses it).
var ErrTopicNotAllowed = errors.New("kafka: topic missing and not creatable")

// DeadLetterWriter writes failed records to a dead-letter topic, each with
// the key, value, timestamp and headers it is given, then HeaderError (the
// reason) and the origin: HeaderTopic, HeaderPartition, HeaderOffset. It
// is what both an undecodable record (the source) and a record whose
// expressions fail (a job's transforms) go through. Writes are
// asynchronous; Flush, called at every barrier, waits until each is
// acknowledged, so a checkpoint never covers a record whose dead letter
// could still be lost. It is used by one goroutine (a subtask's).
type DeadLetterWriter struct {
	cl        *kgo.Client
	topic     string
	ctx       context.Context
	count     prometheus.Counter
	unflushed int
	mu        struct {
		sync.Mutex
		err error // first failed write since the last flush
	}
}

// NewDeadLetterWriter writes dead letters to topic with cl, until ctx ends,
// counting each in count. The caller owns cl.
func NewDeadLetterWriter(ctx context.Context, cl *kgo.Client, topic string, count prometheus.Counter) *DeadLetterWriter {
	return &DeadLetterWriter{cl: cl, topic: topic, ctx: ctx, count: count}
}

// Write sends a dead letter of origin, the record as read (its topic,
// partition and offset name the origin in the headers), with value instead
// of the record's own when value is not nil.
func (d *DeadLetterWriter) Write(origin *kgo.Record, value []byte, reason error) {
	d.write(DeadLetterRecord(d.topic, origin, value, reason), fmt.Sprintf("%s/%d offset %d", origin.Topic, origin.Partition, origin.Offset))
}

// DeadLetterRecord returns the dead letter of origin for topic: the record as
// read (value instead of its own when not nil), its headers, and headers
// naming the reason and the origin's topic, partition and offset. A
// writer of its own, stage 1 of a scaled job, produces it in its
// transaction.
func DeadLetterRecord(topic string, origin *kgo.Record, value []byte, reason error) *kgo.Record {
	if value == nil {
		value = origin.Value
	}
	headers := make([]kgo.RecordHeader, 0, len(origin.Headers)+4)
	headers = append(headers, origin.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(reason.Error())},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(origin.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(origin.Partition), 10)},
		kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, origin.Offset, 10)},
	)
	return &kgo.Record{Topic: topic, Key: origin.Key, Value: value, Headers: headers, Timestamp: origin.Timestamp}
}

// WriteRecord sends a dead letter of a record that is no longer tied to
// the Kafka record it came from (a late record, after the shuffle to its
// window): key and value as given, HeaderError the reason, no origin
// headers.
func (d *DeadLetterWriter) WriteRecord(key, value []byte, reason error) {
	headers := []kgo.RecordHeader{{Key: HeaderError, Value: []byte(reason.Error())}}
	d.write(&kgo.Record{Topic: d.topic, Key: key, Value: value, Headers: headers}, fmt.Sprintf("record %.100s", value))
}

// write produces dl, counting it; what names its origin in an error.
func (d *DeadLetterWriter) write(dl *kgo.Record, what string) {
	d.unflushed++
	d.count.Inc()
	d.cl.Produce(d.ctx, dl, func(_ *kgo.Record, err error) {
		if err != nil {
			d.mu.Lock()
			if d.mu.err == nil {
				d.mu.err = fmt.Errorf("write dead letter of %s to %q: %w", what, d.topic, err)
			}
			d.mu.Unlock()
		}
	})
}

// Flush waits for every write so far; an error fails the checkpoint, and
// the records are read and written again from the previous one.
func (d *DeadLetterWriter) Flush(ctx context.Context) error {
	if d.unflushed == 0 {
		return nil
	}
	if err := d.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush dead letters to %q: %w", d.topic, err)
	}
	d.unflushed = 0
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.mu.err
	d.mu.err = nil
	return err
}

// deadLetterCheckTimeout bounds the check of the dead-letter topic when a
// subtask opens.
const deadLetterCheckTimeout = 10 * time.Second

// PrepareDeadLetterTopic makes sure the dead-letter topic exists before the
// first bad record: it creates it (the broker's default partitions and
// replication) when absent. A topic that is missing and may not be created
// is an error wrapping ErrTopicNotAllowed and runtime-permanent, for the
// caller to fail its start with. A broker that does not answer within 10 s
// is no error (the writes wait for it like the source's reads do): warn is
// called with the reason.
func PrepareDeadLetterTopic(ctx context.Context, adm *kadm.Client, topic string, warn func(msg string, args ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, deadLetterCheckTimeout)
	defer cancel()
	_, err := EnsureTopic(ctx, adm, topic, -1)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrTopicNotAllowed):
		return runtime.Permanent(fmt.Errorf("dead-letter topic: %w", err))
	}
	warn("kafka: could not make sure the dead-letter topic exists; going on", "topic", topic, "error", err)
	return nil
}

// EnsureTopic creates topic with the given partitions (-1: the broker's
// default) and the broker's default replication when it is absent, waits
// until the broker lists it, and returns its partition count. It creates
// first: listing a missing topic makes the client retry for seconds. When
// creation is refused (authorization, policy) an existing topic is fine;
// a missing one is ErrTopicNotAllowed.
func EnsureTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) (int, error) {
	resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	refused := errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.PolicyViolation)
	if err != nil && !refused && !errors.Is(err, kerr.TopicAlreadyExists) {
		return 0, fmt.Errorf("create topic %q: %w", topic, err)
	}
	for {
		details, lerr := adm.ListTopics(ctx, topic)
		d, ok := details[topic]
		if lerr == nil && ok && d.Err == nil && len(d.Partitions) > 0 {
			return len(d.Partitions), nil
		}
		if lerr == nil && ok {
			lerr = d.Err
		}
		// Without DESCRIBE (which WRITE implies) the topic is of no use
		// either, whether it exists or not.
		if refused && (lerr == nil || errors.Is(lerr, kerr.UnknownTopicOrPartition) || errors.Is(lerr, kerr.TopicAuthorizationFailed)) {
			return 0, fmt.Errorf("%w: topic %q does not exist and this client may not create it (%v): create it, or grant the client CREATE on it (and WRITE, DESCRIBE)",
				ErrTopicNotAllowed, topic, err)
		}
		if lerr != nil && !errors.Is(lerr, kerr.UnknownTopicOrPartition) {
			return 0, fmt.Errorf("list topic %q: %w", topic, lerr)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for topic %q: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
