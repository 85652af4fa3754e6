package kafka_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
)

// timed makes a test record on partition p with Kafka timestamp (and field
// "ts", in milliseconds) at sec seconds.
func timed(topic string, p int32, seq uint64, sec float64) *kgo.Record {
	ms := int64(sec * 1000)
	return &kgo.Record{Topic: topic, Partition: p, Timestamp: time.UnixMilli(ms),
		Value: fmt.Appendf(nil, `{"seq":%d,"key":%d,"value":%d,"ts":%d}`, seq, operators.KeyOf(seq, testKeys), operators.ValueOf(seq), ms)}
}

// secs is event time at sec seconds minus the bound minus 1ns: the
// watermark of a partition whose largest event time is sec.
func secs(sec float64, bound time.Duration) int64 {
	return int64(sec*1e9) - int64(bound) - 1
}

// startEventJob runs the one-subtask kafka → collect job until the returned
// stop is called.
func startEventJob(t *testing.T, dir string, src *kafka.Source[operators.Event]) (*runtime.Job, func()) {
	t.Helper()
	j := eventJob(t, dir, src, 1, 0, func(o *runtime.Options) { o.WatermarkInterval = 5 * time.Millisecond })
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	return j, func() {
		defer cancel()
		j.Stop()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
	}
}

// awaitSourceWatermark waits for the source subtask's watermark to be want.
func awaitSourceWatermark(t *testing.T, j *runtime.Job, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ts runtime.TaskStatus
		if st := j.Status(); len(st.Tasks) > 0 {
			ts = st.Tasks[0]
		}
		got := watermark.FromTime(ts.Watermark)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("source watermark %s (idle %v), want %s", watermark.Format(got), ts.WatermarkIdle, watermark.Format(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEventTimeKafkaTimestamp: with the Kafka timestamp as event time, the
// watermark is the least over the partitions of their largest timestamp
// minus the bound; a partition moving ahead moves it to the next least.
// Restored, each partition's largest event time comes back from the
// checkpoint: a partition that gets no record after the restore still
// counts with it.
func TestEventTimeKafkaTimestamp(t *testing.T) {
	const bound = time.Second
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	kafkatest.Produce(t, brokers, timed(topic, 0, 0, 10), timed(topic, 0, 1, 20), timed(topic, 0, 2, 15), // out of order
		timed(topic, 1, 3, 5), timed(topic, 1, 4, 8), timed(topic, 2, 5, 12))
	cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic},
		EventTime: &kafka.EventTime{MaxOutOfOrderness: bound}}
	dir := t.TempDir()
	j, stop := startEventJob(t, dir, newSource(t, cfg, eventFormat))
	awaitSourceWatermark(t, j, secs(8, bound)) // partition 1 is behind
	kafkatest.Produce(t, brokers, timed(topic, 1, 6, 30))
	awaitSourceWatermark(t, j, secs(12, bound)) // now partition 2
	stop()

	// Restored: partitions 0 (20s) and 2 (12s) get nothing new.
	j, stop = startEventJob(t, dir, newSource(t, cfg, eventFormat))
	awaitSourceWatermark(t, j, secs(12, bound)) // the restored floor, announced
	kafkatest.Produce(t, brokers, timed(topic, 2, 7, 25))
	awaitSourceWatermark(t, j, secs(20, bound)) // partition 0's restored 20s is the least now
	stop()
	got, err := operators.ReadCommitted(filepath.Join(dir, "out"), eventCodec)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Fatalf("%d records committed, want 8", len(got))
	}
}

// TestEventTimeFieldAndIdlePartition: event time from a field of the
// record; an empty partition holds the watermark back until its idle
// timeout, then no longer, and a record on it later makes it count again.
func TestEventTimeFieldAndIdlePartition(t *testing.T) {
	const bound = 500 * time.Millisecond
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic},
		// Idle after 5s: long enough that a loaded machine's pause in the
		// beat below does not idle partition 1 (watermarks never go back,
		// so one such pause would end the test at 40s).
		EventTime: &kafka.EventTime{MaxOutOfOrderness: bound, IdleTimeout: 5 * time.Second}}
	fieldTime := kafka.Timestamp(func(r *kgo.Record, _ operators.Event) (int64, error) {
		v, err := fastjson.ParseBytes(r.Value)
		if err != nil {
			return 0, err
		}
		if !v.Exists("ts") {
			return 0, fmt.Errorf("no ts")
		}
		return v.GetInt64("ts") * int64(time.Millisecond), nil
	})
	src, err := kafka.NewSource(cfg, eventFormat, fieldTime)
	if err != nil {
		t.Fatal(err)
	}
	// Partitions 0 and 1 get a record every 50ms, at fixed event times
	// (the field; the Kafka timestamps say otherwise): they stay active.
	stopBeat := make(chan struct{})
	beatDone := make(chan struct{})
	var p1 atomic.Int64 // partition 1's event time, in seconds
	p1.Store(30)
	seq := uint64(0)
	producer := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	go func() {
		defer close(beatDone)
		for {
			recs := []*kgo.Record{timed(topic, 0, seq, 40), timed(topic, 1, seq+1, float64(p1.Load()))}
			for _, r := range recs {
				r.Timestamp = time.UnixMilli(1)
			}
			if err := producer.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			seq += 2
			select {
			case <-stopBeat:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	j, stop := startEventJob(t, t.TempDir(), src)
	awaitSourceWatermark(t, j, secs(30, bound)) // partition 2, empty, idle: no longer holding it back
	// A record on partition 2: active again, it counts in the least once
	// partition 1 moves past it (without it: 40s, partition 0's).
	kafkatest.Produce(t, brokers, timed(topic, 2, 1_000_000, 35))
	p1.Store(50)
	awaitSourceWatermark(t, j, secs(35, bound))
	close(stopBeat)
	<-beatDone
	stop()
}

// TestEventTimeBadField: a record whose event time cannot be read follows
// the decode error policy.
func TestEventTimeBadField(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	kafkatest.Produce(t, brokers, &kgo.Record{Topic: topic, Value: []byte(`{"seq":0,"key":0,"value":1}`)})
	cfg := kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}, EventTime: &kafka.EventTime{}}
	src, err := kafka.NewSource(cfg, eventFormat, kafka.Timestamp(func(*kgo.Record, operators.Event) (int64, error) {
		return 0, fmt.Errorf("no ts")
	}))
	if err != nil {
		t.Fatal(err)
	}
	j := eventJob(t, t.TempDir(), src, 1, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = j.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "event time: no ts") || !strings.Contains(err.Error(), "offset 0") {
		t.Fatalf("run: %v, want the event-time error naming the record", err)
	}
}

func TestEventTimeConfigValidated(t *testing.T) {
	_, err := kafka.NewSource(kafka.Config{Connection: kafka.Connection{Brokers: []string{"x:1"}}, Topics: []string{"t"},
		EventTime: &kafka.EventTime{MaxOutOfOrderness: -time.Second}}, eventFormat)
	if err == nil || !strings.Contains(err.Error(), "negative max out-of-orderness") {
		t.Fatalf("NewSource: %v, want the negative bound refused", err)
	}
}
