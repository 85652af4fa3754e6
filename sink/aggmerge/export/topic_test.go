package export

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/internal/syncbuf"
	"github.com/ebbflow/ebbflow/operators/kafka"
)

// TestExportCreatesTopicQuietly: an exporter whose topic does not exist
// creates it with a partition per bucket and starts without a warning
// (the new topic, still unknown for a moment, is waited for), then exports
// as usual.
func TestExportCreatesTopicQuietly(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := fmt.Sprintf("created-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
		defer cancel()
		_, _ = kafkatest.Admin(t, brokers).DeleteTopic(ctx, topic)
	})
	var logs syncbuf.Buffer
	tbl := openTable(t, t.TempDir())
	cfg := Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	w := newMultiWriter(t, tbl, 3)
	w.batch(20)
	w.checkpoint()
	x, stop := startExporter(t, cfg)
	waitExported(t, x, tbl)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(logs.String()) != "" {
		t.Errorf("first start logged:\n%s", logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	details, err := kafkatest.Admin(t, brokers).ListTopics(ctx, topic)
	if err != nil || len(details[topic].Partitions) != testBuckets {
		t.Fatalf("topic %q: %v partitions (%v), want %d", topic, len(details[topic].Partitions), err, testBuckets)
	}
	sameMaps(t, topicJSON(t, brokers, topic, UpsertJSON), tableJSON(t, tbl))
}
