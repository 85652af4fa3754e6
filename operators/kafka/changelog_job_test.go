package kafka_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// upsertRecords makes upsert-json records of keys k0..k4 (key i in
// partition i%2), version v of each, every third one a tombstone.
func upsertRecords(topic string, from, to int) []*kgo.Record {
	var recs []*kgo.Record
	for v := from; v < to; v++ {
		for k := range 5 {
			r := &kgo.Record{Topic: topic, Partition: int32(k % 2), Key: fmt.Appendf(nil, `{"k":%d}`, k)}
			if (v+k)%3 != 2 {
				r.Value = fmt.Appendf(nil, `{"k":%d,"v":%d}`, k, v)
			}
			recs = append(recs, r)
		}
	}
	return recs
}

// expectedLines normalizes recs in memory: the oracle, per key.
func expectedLines(t *testing.T, recs []*kgo.Record) map[string][]string {
	dec := changelogfmt.UpsertJSON.Decoder()()
	var n kafka.Normalizer
	out := map[string][]string{}
	for _, r := range recs {
		c, err := dec(r)
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := n.Normalize(c); ok {
			_ = c.Rows(func(k runtime.RowKind, row kafka.Row) error {
				out[string(c.RawKey)] = append(out[string(c.RawKey)], k.String()+" "+row.String())
				return nil
			})
		}
	}
	return out
}

// changelogJob reads the topic, normalizes in keyed state and commits
// "key|kind row" lines.
func changelogJob(t *testing.T, dir, topic string, brokers []string) *runtime.Job {
	src, err := kafka.NewSource(kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}, changelogfmt.UpsertJSON.Decoder())
	if err != nil {
		t.Fatal(err)
	}
	j := runtime.NewJob(runtime.Options{Name: "changelog", DataDir: dir, BatchSize: 3,
		Checkpoint: runtime.CheckpointOptions{Interval: 30 * time.Millisecond}})
	s := runtime.FromSource(j, "changelog", src.New)
	changes := kafka.NormalizeChanges(s, "normalize", runtime.WithParallelism(2))
	lines := runtime.FlatMap(changes, "rows", func(c kafka.Change, out *runtime.Collector[string]) error {
		return c.Rows(func(k runtime.RowKind, row kafka.Row) error {
			out.Emit(string(c.RawKey) + "|" + k.String() + " " + row.String())
			return nil
		})
	})
	runtime.SinkTo(lines, "collect", operators.NewCollectSink(filepath.Join(dir, "out"), state.Codec[string](state.StringCodec{})))
	return j
}

// runUntil runs j until want lines are committed, then stops it with a
// final checkpoint.
func runUntil(t *testing.T, j *runtime.Job, out string, want int) {
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	for {
		got, err := operators.ReadCommitted(out, state.Codec[string](state.StringCodec{}))
		if err == nil && len(got) >= want {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("job ended before committing %d lines: %v", want, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// TestNormalizeChangesAcrossRestore: a job reading an upsert-json changelog
// derives -U and -D from keyed state; stopped and restored, it still knows
// every key's last row, so the first updates after the restore retract the
// rows read before it.
func TestNormalizeChangesAcrossRestore(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 2)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	first, second := upsertRecords(topic, 0, 6), upsertRecords(topic, 6, 12)
	want := expectedLines(t, slices.Concat(first, second))
	count := func(recs []*kgo.Record) int {
		n := 0
		for _, lines := range expectedLines(t, recs) {
			n += len(lines)
		}
		return n
	}

	kafkatest.Produce(t, brokers, first...)
	runUntil(t, changelogJob(t, dir, topic, brokers), out, count(first))
	kafkatest.Produce(t, brokers, second...)
	runUntil(t, changelogJob(t, dir, topic, brokers), out, count(slices.Concat(first, second)))

	lines, err := operators.ReadCommitted(out, state.Codec[string](state.StringCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, l := range lines {
		key, rest, _ := strings.Cut(l, "|")
		got[key] = append(got[key], rest)
	}
	for key, w := range want {
		if !slices.Equal(got[key], w) {
			t.Fatalf("key %s:\n got %q\nwant %q", key, got[key], w)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys, want %d", len(got), len(want))
	}
}
