package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
)

// TestAbuseTwoTeamsOneCluster runs the quickstart three times, as three
// teams would, each runner with its own data dir, all exporting the table
// "revenue" to one Kafka cluster: teams A and B to their own topics both
// keep running (their transactional ids derive from their data dirs, so
// neither fences the other); team C, pointed at A's topic, exits 1 at its
// start with an error naming both exporters, and A goes on exporting.
func TestAbuseTwoTeamsOneCluster(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	adm := kafkatest.Admin(t, brokers)
	list := "[" + strings.Join(brokers, ",") + "]"
	team := func(dir, topic string) *child {
		return start(t, nil, "run", "-f", quickstart, "--data-dir", dir, "--http-address", "off", "--summary", "0",
			"--set", "sink.table.changelog.brokers="+list, "--set", "sink.table.changelog.topic="+topic,
			"--set", "checkpoint.interval=100ms")
	}
	grown := func(c *child, topic string, what string) {
		t.Helper()
		from := kafkatest.EndOffsets(t, adm, topic)
		waitFor(t, c, 60*time.Second, what, func() bool { return kafkatest.EndOffsets(t, adm, topic) > from })
	}
	ta, tb := kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers)
	dirA, dirB, dirC := t.TempDir(), t.TempDir(), t.TempDir()
	a := team(dirA, ta)
	grown(a, ta, "A exporting")
	b := team(dirB, tb)
	grown(b, tb, "B exporting")
	grown(a, ta, "A exporting after B started")

	c := team(dirC, ta)
	if code := c.exitCode(t, 60*time.Second); code != exitFailure {
		t.Fatalf("C: exit %d, want %d; log:\n%s", code, exitFailure, c.stderr.String())
	}
	idA, idC := "ebbflow-"+deployment(t, dirA)+"-quickstart-revenue", "ebbflow-"+deployment(t, dirC)+"-quickstart-revenue"
	if log := c.stderr.String(); !strings.Contains(log, "belongs to another table") || !strings.Contains(log, idA) || !strings.Contains(log, idC) {
		t.Fatalf("C's log does not name both exporters (%s, %s):\n%s", idA, idC, log)
	}
	grown(a, ta, "A exporting after C failed")
	stopGracefully(t, b)
	stopGracefully(t, a)
}

func deployment(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "deployment.id"))
	if err != nil {
		t.Fatal(fmt.Errorf("deployment id: %w", err))
	}
	return strings.TrimSpace(string(b))
}
