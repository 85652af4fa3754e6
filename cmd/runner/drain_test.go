package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// TestStopDrainsChangelog stops the quickstart with SIGTERM as soon as its
// table holds every order, usually before a periodic checkpoint covered
// the last writes: the runner exits only once its exporter has published
// what the final checkpoint committed, so the topic, read after the runner
// is gone, gives exactly the table.
func TestStopDrainsChangelog(t *testing.T) {
	const count = 3000
	brokers := kafkatest.Brokers(t)
	orders := kafkatest.NewTopic(t, brokers, 2)
	changelog := kafkatest.NewTopic(t, brokers, 4) // the table's buckets; deleted at the end
	dir := t.TempDir()
	list := "[" + strings.Join(brokers, ",") + "]"
	sets := []string{fmt.Sprintf("source.datagen.count=%d", count), "source.datagen.rate=0", "checkpoint.interval=5s"}
	args := []string{"run", "-f", quickstart, "--data-dir", dir, "--http-address", "127.0.0.1:0", "--summary", "0",
		"--set", "source.datagen.topic=" + orders, "--set", "source.datagen.kafka.brokers=" + list,
		"--set", "sink.table.changelog.brokers=" + list, "--set", "sink.table.changelog.topic=" + changelog}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	want, _ := quickstartOracle(t, sets, count)
	c := start(t, nil, args...)
	waitFor(t, c, 60*time.Second, "every paid order in the table", func() bool {
		return liveRunner(dir) != "" && totalOrders(scanJSON(t, dir, "revenue", "region")) == totalOrders(want)
	})
	stopGracefully(t, c)
	if !strings.Contains(c.stderr.String(), "changelog export caught up") {
		t.Errorf("no drain logged; log:\n%s", c.stderr.String())
	}

	table := scanJSON(t, dir, "revenue", "region")
	kafkatest.WaitStable(t, brokers, changelog) // the last commit's markers
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	topic, err := export.ReadTable(ctx, export.ReaderConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: changelog})
	if err != nil {
		t.Fatal(err)
	}
	if len(topic) != len(table) {
		t.Fatalf("the topic gives %d rows, the table has %d", len(topic), len(table))
	}
	for _, row := range topic {
		region, _ := row.Get("region")
		name, _ := region.Str()
		for _, col := range []string{"revenue_cents", "orders", "largest", "last_order"} {
			v, _ := row.Get(col)
			if got, w := string(v.AppendJSON(nil)), fmt.Sprint(table[name][col]); got != w {
				t.Errorf("region %s %s: %s in the topic, %s in the table", name, col, got, w)
			}
		}
	}
}
