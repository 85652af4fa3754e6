package embedded_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
)

func start(t *testing.T, opts embedded.Options) *embedded.Broker {
	t.Helper()
	b, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// produceAuto writes n records to a topic that does not exist yet, spread
// round-robin over partitions, and returns the values in the order a
// read_committed reader of the whole topic gets them (partition, offset).
func produceAuto(t *testing.T, brokers []string, topic string, n, partitions int) []string {
	t.Helper()
	cl := kafkatest.Client(t, brokers, kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Key: []byte(strconv.Itoa(i)), Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	var want []string
	for p := range partitions {
		for i := p; i < n; i += partitions {
			want = append(want, fmt.Sprintf("v%d", i))
		}
	}
	return want
}

func values(recs []*kgo.Record) []string {
	var vs []string
	for _, r := range recs {
		vs = append(vs, string(r.Value))
	}
	return vs
}

func TestAutoCreatedTopicsProduceAndConsume(t *testing.T) {
	for _, tc := range []struct {
		partitions, want int
	}{
		{partitions: 0, want: embedded.DefaultPartitions},
		{partitions: 3, want: 3},
	} {
		t.Run(fmt.Sprintf("partitions=%d", tc.partitions), func(t *testing.T) {
			brokers := start(t, embedded.Options{Partitions: tc.partitions}).Addrs()
			want := produceAuto(t, brokers, "orders", 30, tc.want)

			details, err := kafkatest.Admin(t, brokers).ListTopics(t.Context(), "orders")
			if err != nil {
				t.Fatal(err)
			}
			if got := len(details["orders"].Partitions); got != tc.want {
				t.Fatalf("auto-created topic has %d partitions, want %d", got, tc.want)
			}
			if got := values(kafkatest.ConsumeAll(t, brokers, "orders")); !slices.Equal(got, want) {
				t.Fatalf("consumed %v, want %v", got, want)
			}
		})
	}
}

func TestPort(t *testing.T) {
	port := kafkatest.FreePort(t)
	b := start(t, embedded.Options{Port: port})
	if got, want := b.Addrs(), []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}; !slices.Equal(got, want) {
		t.Fatalf("Addrs() = %v, want %v", got, want)
	}
	if _, err := embedded.Start(embedded.Options{Port: port}); err == nil {
		t.Fatalf("second broker on busy port %d started", port)
	}
	b.Close()
	b.Close() // idempotent
	again := start(t, embedded.Options{Port: port})
	produceAuto(t, again.Addrs(), "t", 1, 1)
}

func TestInvalidOptions(t *testing.T) {
	for _, opts := range []embedded.Options{{Port: -1}, {Port: 65536}, {Partitions: -1}} {
		if b, err := embedded.Start(opts); err == nil {
			b.Close()
			t.Errorf("Start(%+v) succeeded, want an error", opts)
		}
	}
}

func TestDataDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	first, err := embedded.Start(embedded.Options{DataDir: dir, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := produceAuto(t, first.Addrs(), "kept", 10, 2)
	first.Close()

	second := start(t, embedded.Options{DataDir: dir, Partitions: 2})
	if got := values(kafkatest.ConsumeAll(t, second.Addrs(), "kept")); !slices.Equal(got, want) {
		t.Fatalf("after restart consumed %v, want %v", got, want)
	}
}

func TestLoggerGetsBrokerLog(t *testing.T) {
	var buf lockedBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := start(t, embedded.Options{Logger: logger})

	// A truncated metadata request (key 3, version 1, correlation id 1, null
	// client id, then one byte where the topic array belongs): the broker
	// logs that it cannot parse it and hangs up.
	conn, err := net.Dial("tcp", b.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := []byte{0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	if _, err := conn.Write(append(frame, body...)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); !strings.Contains(got, "unable to parse request") || !strings.Contains(got, "component=embedded-kafka") {
		t.Fatalf("broker log did not reach the logger; got %q", got)
	}
}

// lockedBuffer collects the log the broker's goroutines write.
type lockedBuffer struct {
	mu struct {
		sync.Mutex
		buf bytes.Buffer
	}
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.buf.String()
}
