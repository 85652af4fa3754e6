package kafka_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// eventJSON is the value of the test record seq: the fields of an
// operators.Event, as the sequence source makes them.
func eventJSON(seq uint64, keys uint64) []byte {
	return fmt.Appendf(nil, `{"seq":%d,"key":%d,"value":%d}`, seq, operators.KeyOf(seq, keys), operators.ValueOf(seq))
}

// eventRecords makes the records of seqs [from, to), seq on partition seq mod
// partitions.
func eventRecords(topic string, partitions int, from, to, keys uint64) []*kgo.Record {
	recs := make([]*kgo.Record, 0, to-from)
	for seq := from; seq < to; seq++ {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(seq % uint64(partitions)), Value: eventJSON(seq, keys)})
	}
	return recs
}

func produceEvents(t testing.TB, brokers []string, topic string, partitions int, from, to uint64) {
	t.Helper()
	kafkatest.Produce(t, brokers, eventRecords(topic, partitions, from, to, testKeys)...)
}

const testKeys = 50

// eventFormat decodes test records with fastjson.
var eventFormat = kafka.JSONWith(func(v *fastjson.Value) (operators.Event, error) {
	e := operators.Event{Seq: v.GetUint64("seq"), Key: v.GetUint64("key"), Value: v.GetInt64("value")}
	if !v.Exists("seq") {
		return e, fmt.Errorf("no seq")
	}
	return e, nil
})

var eventCodec state.Codec[operators.Event] = state.JSONCodec[operators.Event]{}

// newSource builds a source or fails the test.
func newSource[T any](t testing.TB, cfg kafka.Config, f kafka.Format[T]) *kafka.Source[T] {
	t.Helper()
	src, err := kafka.NewSource(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// runUntilCommitted runs j until the collecting sink under out has
// committed at least want records, then stops it with a final checkpoint
// and returns what was committed. The during functions run, in order, on
// the test goroutine while the job runs.
func runUntilCommitted(t testing.TB, j *runtime.Job, out string, want int, during ...func()) []operators.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	for _, f := range during {
		f()
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			t.Fatalf("job ended before committing %d records: %v", want, err)
		case <-tick.C:
		}
		got, err := operators.ReadCommitted(out, eventCodec)
		if err == nil && len(got) >= want {
			break
		}
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatalf("stop: %v", err)
	}
	got, err := operators.ReadCommitted(out, eventCodec)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkSeqs fails unless got holds every seq of [0, n) exactly once.
func checkSeqs(t testing.TB, got []operators.Event, n uint64) {
	t.Helper()
	checkExactly(t, got, n, func(uint64) bool { return true })
}

// checkExactly fails unless got holds exactly once every seq of [0, n) for
// which want is true, and nothing else.
func checkExactly(t testing.TB, got []operators.Event, n uint64, want func(seq uint64) bool) {
	t.Helper()
	seen := make([]int, n)
	var extra []uint64
	for _, e := range got {
		if e.Seq >= n || !want(e.Seq) {
			extra = append(extra, e.Seq)
			continue
		}
		seen[e.Seq]++
		if e.Key != operators.KeyOf(e.Seq, testKeys) || e.Value != operators.ValueOf(e.Seq) {
			t.Fatalf("record %+v does not match what was produced", e)
		}
	}
	var dup, missing []uint64
	for seq, k := range seen {
		if k > 1 && len(dup) < 10 {
			dup = append(dup, uint64(seq))
		}
		if k == 0 && want(uint64(seq)) && len(missing) < 10 {
			missing = append(missing, uint64(seq))
		}
	}
	if len(dup) > 0 || len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("%d records: duplicated %v, missing %v (first 10), unexpected %v", len(got), dup, missing, extra)
	}
}

// eventJob builds kafka source → collecting sink, every operator with
// parallelism par and tiny batches, so that fetches hold more records than
// one Read hands out. With stopAfter > 0 the job stops itself (with a final
// checkpoint) once it has seen that many records.
func eventJob(t testing.TB, dir string, src *kafka.Source[operators.Event], par int, stopAfter int64, opts ...func(*runtime.Options)) *runtime.Job {
	o := runtime.Options{Name: "kafka-test", DataDir: dir, BatchSize: 7,
		Checkpoint: runtime.CheckpointOptions{Interval: 30 * time.Millisecond},
		Restart:    runtime.RestartOptions{MaxAttempts: -1}}
	for _, f := range opts {
		f(&o)
	}
	j := runtime.NewJob(o)
	s := runtime.FromSource(j, "kafka", src.New, runtime.WithParallelism(par))
	var seen atomic.Int64
	s = runtime.Map(s, "stop", func(e operators.Event) operators.Event {
		if n := seen.Add(1); stopAfter <= 0 || n < stopAfter {
			return e
		} else if n == stopAfter {
			j.Stop()
		} else {
			time.Sleep(time.Millisecond) // let the final barrier overtake the reading
		}
		return e
	})
	runtime.SinkTo(s, "collect", operators.NewCollectSink(filepath.Join(dir, "out"), eventCodec), runtime.WithParallelism(par))
	return j
}

// runToStop runs a job that stops itself and returns what is committed.
func runToStop(t testing.TB, j *runtime.Job, out string) []operators.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	if err := j.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	got, err := operators.ReadCommitted(out, eventCodec)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
