package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

const lostJob = "testdata/lost.yaml"

// TestAbuseLostCheckpoints runs a bounded job to its end, then deletes its
// checkpoints (<data>/jobs) and runs it again: the table holds the writes
// of the job's writers and they have no state to undo from, so the run is
// refused (exit 3) with a message naming the table, the writer, its last
// committed checkpoint and the ways out, and the table is left as it was.
// --from-checkpoint none is refused the same way, --reset-writer without it
// is bad usage; --from-checkpoint none --reset-writer takes back what the
// job wrote and runs it afresh: the table is the input counted once. A
// later run restores the reset run's last checkpoint and changes nothing,
// and the table's changelog, read to its end, gives the table.
func TestAbuseLostCheckpoints(t *testing.T) {
	dir := t.TempDir()
	want := lostOracle(t)
	brokers := kafkatest.Brokers(t)
	changelog := kafkatest.NewTopic(t, brokers, 4) // the table's buckets
	run := func(extra ...string) *child {
		args := []string{"run", "-f", lostJob, "--data-dir", dir, "--http-address", "off", "--summary", "0",
			"--set", "sink.table.changelog.brokers=[" + strings.Join(brokers, ",") + "]", "--set", "sink.table.changelog.topic=" + changelog}
		return start(t, nil, append(args, extra...)...)
	}
	if c := run(); c.exitCode(t, 60*time.Second) != 0 {
		t.Fatalf("first run: log:\n%s", c.stderr.String())
	}
	if d := diffTotals(scanJSON(t, dir, "lost_totals", "user"), want); d != "" {
		t.Fatalf("after the first run: %s", d)
	}
	cps, err := build.ListCheckpoints(dir, "lost")
	if err != nil || len(cps) == 0 {
		t.Fatalf("checkpoints of the first run: %v %v", cps, err)
	}
	last := cps[len(cps)-1].ID
	if err := os.RemoveAll(filepath.Join(dir, "jobs")); err != nil {
		t.Fatal(err)
	}

	for _, extra := range [][]string{nil, {"--from-checkpoint", "none"}} {
		c := run(extra...)
		if code := c.exitCode(t, 60*time.Second); code != exitRestore {
			t.Fatalf("run %v without the job's checkpoints: exit %d, want %d; log:\n%s", extra, code, exitRestore, c.stderr.String())
		}
		log := c.stderr.String()
		for _, f := range []string{
			"table " + build.TableDir(dir, "lost_totals"), "lost/lost_totals#0", fmt.Sprintf("last committed checkpoint %d", last),
			"--from-checkpoint none --reset-writer",
			"runner table forget --data-dir " + dir + " --table lost_totals --job lost",
		} {
			if !strings.Contains(log, f) {
				t.Errorf("run %v: the refusal does not say %q; log:\n%s", extra, f, log)
			}
		}
		if d := diffTotals(scanJSON(t, dir, "lost_totals", "user"), want); d != "" {
			t.Fatalf("a refused run changed the table: %s", d)
		}
	}
	if c := run("--reset-writer"); c.exitCode(t, 60*time.Second) != exitUsage {
		t.Fatalf("--reset-writer without --from-checkpoint none: want exit %d; log:\n%s", exitUsage, c.stderr.String())
	}

	c := run("--from-checkpoint", "none", "--reset-writer")
	if code := c.exitCode(t, 60*time.Second); code != 0 {
		t.Fatalf("run with --reset-writer: exit %d; log:\n%s", code, c.stderr.String())
	}
	if !strings.Contains(c.stderr.String(), "writer reset") {
		t.Errorf("the reset is not logged; log:\n%s", c.stderr.String())
	}
	if d := diffTotals(scanJSON(t, dir, "lost_totals", "user"), want); d != "" {
		t.Fatalf("after the reset run: %s", d)
	}
	if c := run(); c.exitCode(t, 60*time.Second) != 0 {
		t.Fatalf("run after the reset run: log:\n%s", c.stderr.String())
	}
	if d := diffTotals(scanJSON(t, dir, "lost_totals", "user"), want); d != "" {
		t.Fatalf("after a run restoring the reset run's checkpoint: %s", d)
	}
	// The changelog (committed mode) shows the reset: read to its end, it
	// gives the table, not the old rows plus the new.
	kafkatest.WaitStable(t, brokers, changelog)
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	rows, err := export.ReadTable(ctx, export.ReaderConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: changelog})
	if err != nil {
		t.Fatal(err)
	}
	topic := map[string]map[string]any{}
	for _, row := range rows {
		cells := map[string]any{}
		for _, col := range []string{"user", "total", "orders", "largest"} {
			v, _ := row.Get(col)
			cells[col] = string(v.AppendJSON(nil))
		}
		topic[fmt.Sprint(cells["user"])] = cells
	}
	if d := diffTotals(topic, want); d != "" {
		t.Fatalf("the changelog read to its end: %s", d)
	}
}

// lostOracle aggregates the generated orders of the job as it does: total,
// orders and largest amount per user.
func lostOracle(t *testing.T) map[string][3]int64 {
	t.Helper()
	files, err := pipelines.ReadFiles(lostJob)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := pipelines.Load(files, pipelines.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := ps[0].NewGenerator(0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][3]int64{}
	for n := range ps[0].Spec.Sources[0].Datagen.Count {
		r := gen.Row(n)
		user, amount := fmt.Sprint(r[0]), r[1].(int64)
		w := want[user]
		w[0] += amount
		w[1]++
		w[2] = max(w[2], amount)
		want[user] = w
	}
	return want
}

// diffTotals describes the first difference between the scanned table and
// the oracle ("" when equal).
func diffTotals(got map[string]map[string]any, want map[string][3]int64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d users, want %d", len(got), len(want))
	}
	for user, w := range want {
		g := got[user]
		have := fmt.Sprintf("%v %v %v", g["total"], g["orders"], g["largest"])
		if exp := fmt.Sprintf("%d %d %d", w[0], w[1], w[2]); have != exp {
			return fmt.Sprintf("user %s: got total, orders, largest %s, want %s", user, have, exp)
		}
	}
	return ""
}
