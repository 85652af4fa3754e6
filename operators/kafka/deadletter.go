package kafka

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers added to a dead-lettered record, after its own.
const (
	HeaderError     = "ebbflow.error"
	HeaderTopic     = "ebbflow.source.topic"
	HeaderPartition = "ebbflow.source.partition"
	HeaderOffset    = "ebbflow.source.offset"
)

// deadLetters writes undecodable records to a topic. Writes are
// asynchronous; flush, called at every barrier, waits until each is
// acknowledged, so a checkpoint never covers a record whose dead letter
// could still be lost.
type deadLetters struct {
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

func (d *deadLetters) write(r *kgo.Record, reason error) {
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+4)
	headers = append(headers, r.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(reason.Error())},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
	)
	dl := &kgo.Record{Topic: d.topic, Key: r.Key, Value: r.Value, Headers: headers, Timestamp: r.Timestamp}
	d.unflushed++
	d.count.Inc()
	d.cl.Produce(d.ctx, dl, func(_ *kgo.Record, err error) {
		if err != nil {
			d.mu.Lock()
			if d.mu.err == nil {
				d.mu.err = fmt.Errorf("write dead letter of %s/%d offset %d to %q: %w", r.Topic, r.Partition, r.Offset, d.topic, err)
			}
			d.mu.Unlock()
		}
	})
}

// flush waits for every write so far; an error fails the checkpoint, and
// the records are read and written again from the previous one.
func (d *deadLetters) flush(ctx context.Context) error {
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
