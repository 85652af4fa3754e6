package kafka

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/runtime/watermark"
)

// EventTime makes a Kafka source assign event time to its records and emit
// watermarks (see docs/EVENT_TIME.md): per partition the largest event
// time read minus MaxOutOfOrderness, and per subtask the minimum over its
// partitions that are not idle. Where the event time comes from is the
// source's Timestamp option (the Kafka record timestamp by default).
type EventTime struct {
	// MaxOutOfOrderness is how far a record may be behind the largest
	// event time read before it from its partition without being late.
	MaxOutOfOrderness time.Duration
	// IdleTimeout declares a partition idle when it delivered no record for
	// this long (processing time), so that it stops holding the watermark
	// back until its next record. 0: partitions never go idle; an empty
	// partition then holds the watermark back for good.
	IdleTimeout time.Duration
}

func (e *EventTime) validate() error {
	if e.MaxOutOfOrderness < 0 || e.IdleTimeout < 0 {
		return fmt.Errorf("event time: negative max out-of-orderness %s or idle timeout %s", e.MaxOutOfOrderness, e.IdleTimeout)
	}
	return nil
}

// Option configures a Source beyond its Config.
type Option[T any] func(*Source[T])

// Timestamp takes each record's event time (Unix ns, see package
// watermark) from its decoded value, or the record; an error is handled by
// the source's OnDecodeError policy like an undecodable record. Without it
// a source with EventTime uses the Kafka timestamp.
func Timestamp[T any](f func(r *kgo.Record, v T) (int64, error)) Option[T] {
	return func(s *Source[T]) { s.timeOf = f }
}

// kafkaTimestamp is the default event time: the record's Kafka timestamp.
func kafkaTimestamp[T any](r *kgo.Record, _ T) (int64, error) {
	return watermark.FromTime(r.Timestamp), nil
}

// Watermark implements runtime.WatermarkSource: a source without EventTime
// emits none (Min, like a source without event time).
func (r *reader[T]) Watermark(now time.Time) (int64, bool) {
	if r.wms == nil {
		return watermark.Min, false
	}
	wm, idle := r.wms.Current(now)
	if r.ct != nil {
		return r.cutWatermark(wm, idle)
	}
	return wm, idle
}
