package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
)

// tailTopic makes a changelog-like topic of 3 partitions: record i (0..19)
// goes to partition i%3 with timestamp base+i ms, each in a transaction of
// its own (so the partitions hold as many markers as records), and
// partition 0 ends with an aborted transaction.
func tailTopic(t *testing.T, brokers []string) string {
	t.Helper()
	topic := kafkatest.NewTopic(t, brokers, 3)
	produceTail(t, brokers, topic, 0, 20)
	txn := kafkatest.Client(t, brokers, kgo.TransactionalID(topic+"-aborted"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(`"aborted"`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	return topic
}

var tailBase = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// produceTail writes records from..to-1 as tailTopic describes.
func produceTail(t *testing.T, brokers []string, topic string, from, to int) {
	t.Helper()
	txn := kafkatest.Client(t, brokers, kgo.TransactionalID(fmt.Sprint(topic, "-", from)), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	for i := from; i < to; i++ {
		r := &kgo.Record{Topic: topic, Partition: int32(i % 3), Timestamp: tailBase.Add(time.Duration(i) * time.Millisecond),
			Key: fmt.Appendf(nil, `{"k":%d}`, i), Value: fmt.Appendf(nil, `{"k":%d,"n":%d}`, i, i*10),
			Headers: []kgo.RecordHeader{{Key: "ebbflow.table", Value: []byte("t")}, {Key: "ebbflow.op", Value: []byte("+I")}}}
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
}

// tailRecord is a line of changelog tail.
type tailRecord struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       struct{ K int }
	Value     struct{ K, N int }
	Headers   map[string]string
}

// tailKeys parses the lines of changelog tail and returns their keys.
func tailKeys(t *testing.T, out string) []int {
	t.Helper()
	keys := []int{}
	for line := range strings.Lines(out) {
		var r tailRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if r.Value.K != r.Key.K || r.Value.N != 10*r.Key.K || r.Partition != int32(r.Key.K%3) ||
			!r.Timestamp.Equal(tailBase.Add(time.Duration(r.Key.K)*time.Millisecond)) {
			t.Fatalf("line %q: not record %d as written", line, r.Key.K)
		}
		if len(r.Headers) != 2 || r.Headers["ebbflow.table"] != "t" || r.Headers["ebbflow.op"] != "+I" {
			t.Fatalf("line %q: headers %v, want ebbflow.table and ebbflow.op as written", line, r.Headers)
		}
		keys = append(keys, r.Key.K)
	}
	return keys
}

// tail runs the changelog tail command in this process and returns its
// stdout, stderr and exit code; a tail that does not end fails the test.
func tail(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- execute(append([]string{"changelog", "tail"}, args...), &stdout, &stderr) }()
	select {
	case code := <-done:
		return stdout.String(), stderr.String(), code
	case <-time.After(60 * time.Second):
		t.Fatalf("changelog tail %s did not end", strings.Join(args, " "))
		return "", "", 0
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// TestChangelogTail: -n N prints the N latest records of the whole topic
// (by timestamp, oldest first), all of them and no more when it has fewer,
// and ends; headers keep their names; a topic that does not exist is an
// error; --from-start prints every record.
func TestChangelogTail(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := tailTopic(t, brokers)
	b := strings.Join(brokers, ",")
	for _, c := range []struct {
		args []string
		want []int
	}{
		{[]string{"-n", "5"}, seq(15, 20)},
		{[]string{"-n", "1"}, seq(19, 20)},
		{nil, seq(10, 20)}, // tail's default: 10
		{[]string{"-n", "50"}, seq(0, 20)},
		{[]string{"-n", "0"}, []int{}},
	} {
		out, stderr, code := tail(t, append([]string{"--brokers", b, "--topic", topic}, c.args...)...)
		if code != 0 {
			t.Fatalf("tail %v: exit %d: %s", c.args, code, stderr)
		}
		if got := tailKeys(t, out); !slices.Equal(got, c.want) {
			t.Errorf("tail %v: records %v, want %v", c.args, got, c.want)
		}
	}
	out, stderr, code := tail(t, "--brokers", b, "--topic", topic, "--from-start")
	got := tailKeys(t, out)
	if code != 0 || len(got) != 20 {
		t.Fatalf("tail --from-start: exit %d, records %v: %s", code, got, stderr)
	}
	for p := range 3 { // each partition's in offset order
		other := func(k int) bool { return k%3 != p }
		if mine, want := slices.DeleteFunc(slices.Clone(got), other), slices.DeleteFunc(seq(0, 20), other); !slices.Equal(mine, want) {
			t.Errorf("tail --from-start: partition %d records %v, want %v", p, mine, want)
		}
	}
	if _, _, code := tail(t, "--brokers", b, "--topic", topic, "--from-start", "-n", "3"); code != exitUsage {
		t.Errorf("--from-start with -n: exit %d, want %d", code, exitUsage)
	}
	_, stderr, code = tail(t, "--brokers", b, "--topic", topic+"-nope", "-n", "1")
	if code != exitFailure || !strings.Contains(stderr, "does not exist") {
		t.Errorf("tail of a topic that does not exist: exit %d: %s", code, stderr)
	}
}

// TestChangelogTailFollow: -f prints the latest records, then the new
// ones as they come, until interrupted (exit 0).
func TestChangelogTailFollow(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := tailTopic(t, brokers)
	c := start(t, nil, "changelog", "tail", "--brokers", strings.Join(brokers, ","), "--topic", topic, "-n", "2", "-f")
	waitFor(t, c, 30*time.Second, "the 2 latest records", func() bool { return slices.Equal(tailKeys(t, c.stdout.String()), seq(18, 20)) })
	produceTail(t, brokers, topic, 20, 25)
	waitFor(t, c, 30*time.Second, "the new records", func() bool {
		got := tailKeys(t, c.stdout.String())
		slices.Sort(got) // the partitions' new records interleave as they are read
		return slices.Equal(got, seq(18, 25))
	})
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := c.exitCode(t, 30*time.Second); code != 0 {
		t.Fatalf("tail -f after SIGINT: exit %d; stderr:\n%s", code, c.stderr.String())
	}
}
