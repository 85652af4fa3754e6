package repartition

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
)

// TestRunOnError: stage 1 meets input records it cannot map (every
// seventh). With on_error skip they are counted and nothing else of them
// is written; with dead_letter each goes, once, to the dead-letter topic
// in the transaction of its input offsets, naming its origin and the
// error; the others reach the repartition topic once; with fail Run
// ends with ErrRecord naming the first.
func TestRunOnError(t *testing.T) {
	bad := func(seq int) bool { return seq%7 == 3 }
	mapRecord := func(r *kgo.Record, send func(key, value []byte)) error {
		seq, _ := strconv.Atoi(string(r.Value))
		if bad(seq) {
			return errors.New("injected: cannot map " + string(r.Value))
		}
		send(r.Value, append([]byte("r:"), r.Value...))
		return nil
	}
	for _, policy := range []kafka.ErrorPolicy{kafka.Skip, kafka.DeadLetter, kafka.Fail} {
		t.Run(policy.String(), func(t *testing.T) {
			h := newHop(t)
			dlq := kafkatest.TopicName(t, h.brokers)
			h.produceInput(t, 0, 100)
			kafkatest.CreateTopic(t, h.brokers, h.topic, hopPartitions)
			m, err := NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			cfg := WriterConfig{Kafka: kafka.Connection{Brokers: h.brokers}, Group: h.group, Input: []string{h.input}, Topic: h.topic,
				Partitions: hopPartitions, Buckets: hopBuckets, TransactionalID: h.txnID, Metrics: m, OnError: policy, DeadLetterTopic: dlq}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg, 50*time.Millisecond, mapRecord) }()
			if policy == kafka.Fail {
				select {
				case err := <-done:
					if !errors.Is(err, ErrRecord) || !strings.Contains(err.Error(), "injected: cannot map ") {
						t.Fatalf("Run: %v, want ErrRecord naming the record", err)
					}
				case <-time.After(2 * kafkatest.Timeout):
					t.Fatal("Run did not end on the record it cannot map")
				}
				return
			}
			var good []int
			nbad := 0
			for seq := range 100 {
				if bad(seq) {
					nbad++
				} else {
					good = append(good, seq)
				}
			}
			for deadline := time.Now().Add(2 * kafkatest.Timeout); len(h.read(t)) < len(good); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d rows read, want %d", len(h.read(t)), len(good))
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			count := map[string]int{}
			for _, v := range h.read(t) {
				count[v]++
			}
			for _, seq := range good {
				if v := "r:" + strconv.Itoa(seq); count[v] != 1 {
					t.Errorf("%s read %d times, want once", v, count[v])
				}
			}
			if len(count) != len(good) {
				t.Errorf("%d distinct rows read, want %d", len(count), len(good))
			}
			var letters []*kgo.Record
			if policy == kafka.DeadLetter {
				letters = kafkatest.ConsumeAll(t, h.brokers, dlq)
			}
			seen := map[string]int{}
			for _, r := range letters {
				seq, _ := strconv.Atoi(string(r.Value))
				var headers = map[string]string{}
				for _, hd := range r.Headers {
					headers[hd.Key] = string(hd.Value)
				}
				if !bad(seq) || headers[kafka.HeaderError] != "injected: cannot map "+string(r.Value) || headers[kafka.HeaderTopic] != h.input {
					t.Errorf("dead letter %q with headers %v", r.Value, headers)
				}
				seen[string(r.Value)]++
			}
			wantLetters := 0
			if policy == kafka.DeadLetter {
				wantLetters = nbad
			}
			if len(letters) != wantLetters || len(seen) != wantLetters {
				t.Errorf("%d dead letters (%d distinct), want %d once each", len(letters), len(seen), wantLetters)
			}
			counter := m.skipped
			if policy == kafka.DeadLetter {
				counter = m.deadLettered
			}
			var d dto.Metric
			if err := counter.Write(&d); err != nil || d.GetCounter().GetValue() < float64(nbad) {
				t.Errorf("%s counted %v, want at least %d", policy, d.GetCounter().GetValue(), nbad)
			}
		})
	}
}
