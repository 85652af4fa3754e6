package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/pipelines"
)

const quickstart = "../../examples/quickstart/job.yaml"

// TestQuickstart runs the quickstart as a process for a few seconds, with
// a bounded generator, stops it with SIGTERM (exit 0) and checks the table
// against the exact aggregates of the generated orders. The commands find
// the data directory, the table and the changelog topic in the job file,
// as its header shows (-f examples/quickstart/job.yaml; here with its
// data_dir set to a temporary one).
func TestQuickstart(t *testing.T) {
	const count = 1500
	dir := t.TempDir()
	sets := []string{fmt.Sprintf("source.datagen.count=%d", count), "source.datagen.rate=1000"}
	file := []string{"-f", quickstart, "--set", "data_dir=" + dir}
	args := append([]string{"run", "--http-address", "127.0.0.1:0", "--summary", "1s"}, file...)
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	want, lastOrders := quickstartOracle(t, sets, count)
	c := start(t, nil, args...)
	waitFor(t, c, 60*time.Second, "every paid order in the table", func() bool {
		if liveRunner(dir) == "" {
			return false
		}
		out, code := runCLI(t, nil, append([]string{"table", "scan", "-o", "json"}, file...)...)
		return code == 0 && totalOrders(jsonRows(t, out, "region")) == totalOrders(want)
	})
	out, code := runCLI(t, nil, "changelog", "tail", "--file", quickstart, "--set", "data_dir="+dir, "-n", "3")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 3 {
		t.Fatalf("changelog tail: exit %d: %q", code, out)
	} else {
		var rec struct {
			Key     map[string]string
			Value   map[string]any
			Headers map[string]string
		}
		if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || want[rec.Key["region"]] == nil ||
			rec.Value["region"] != rec.Key["region"] || rec.Headers["ebbflow.table"] != "revenue" {
			t.Fatalf("changelog record %s (%v)", lines[0], err)
		}
	}
	stopGracefully(t, c)
	// Stopped, the runner's embedded broker is started on its saved topics.
	if out, code := runCLI(t, nil, "changelog", "tail", "--data-dir", dir, "--topic", "revenue-changelog", "-n", "3"); code != 0 ||
		strings.Count(out, `"ebbflow.table":"revenue"`) != 3 {
		t.Fatalf("changelog tail of the stopped runner: exit %d: %q", code, out)
	}
	// Fewer records than -n: all of them, and the command ends.
	all, code := runCLI(t, nil, "changelog", "tail", "--data-dir", dir, "--topic", "revenue-changelog", "-n", "1000000")
	if n := strings.Count(all, `"ebbflow.table":"revenue"`); code != 0 || n < 3 || n != strings.Count(all, "\n") {
		t.Fatalf("changelog tail -n 1000000 of the stopped runner: exit %d, %d records", code, n)
	}
	if _, stderr, code := runCLIErr(t, nil, "changelog", "tail", "--data-dir", dir, "--topic", "nope"); code != exitFailure ||
		!strings.Contains(stderr, `topic "nope" does not exist`) {
		t.Fatalf("changelog tail of a topic that does not exist: exit %d: %s", code, stderr)
	}
	got := scanJSON(t, dir, "revenue", "region")
	if len(got) != len(want) {
		t.Fatalf("regions %v, want %v", got, want)
	}
	for region, w := range want {
		g := got[region]
		for _, col := range []string{"revenue_cents", "orders", "largest"} {
			if fmt.Sprint(g[col]) != fmt.Sprint(w[col]) {
				t.Errorf("region %s %s = %v, want %v", region, col, g[col], w[col])
			}
		}
		if !lastOrders[region][fmt.Sprint(g["last_order"])] {
			t.Errorf("region %s last_order %v is not the last paid order of either partition", region, g["last_order"])
		}
	}
	if _, err := os.Stat(filepath.Join(dir, runnerFile)); !os.IsNotExist(err) {
		t.Errorf("%s left behind after a graceful stop: %v", runnerFile, err)
	}
}

// quickstartOracle aggregates the generated orders as the job does. The
// last order of a region is the last one of one of the topic's two
// partitions (their order is not defined across partitions).
func quickstartOracle(t *testing.T, sets []string, count int64) (map[string]map[string]any, map[string]map[string]bool) {
	t.Helper()
	files, err := pipelines.ReadFiles(quickstart)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := pipelines.Load(files, pipelines.Options{Set: sets})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := ps[0].NewGenerator(0)
	if err != nil {
		t.Fatal(err)
	}
	type agg struct{ revenue, orders, largest int64 }
	sums := map[string]*agg{}
	last := map[string]map[int64]int64{} // region → partition → order id
	for n := range count {
		r := gen.Row(n)
		if r[3] != "PAID" {
			continue
		}
		region, amount := r[1].(string), r[2].(int64)
		a := sums[region]
		if a == nil {
			a = &agg{}
			sums[region], last[region] = a, map[int64]int64{}
		}
		a.revenue += amount * 100
		a.orders++
		a.largest = max(a.largest, amount)
		last[region][n%2] = r[0].(int64)
	}
	want := map[string]map[string]any{}
	lasts := map[string]map[string]bool{}
	for region, a := range sums {
		want[region] = map[string]any{"revenue_cents": json.Number(fmt.Sprint(a.revenue)), "orders": json.Number(fmt.Sprint(a.orders)),
			"largest": json.Number(fmt.Sprint(a.largest))}
		lasts[region] = map[string]bool{}
		for _, id := range last[region] {
			lasts[region][fmt.Sprint(id)] = true
		}
	}
	return want, lasts
}

func totalOrders(rows map[string]map[string]any) string {
	var n int64
	for _, r := range rows {
		var x int64
		fmt.Sscan(fmt.Sprint(r["orders"]), &x)
		n += x
	}
	return fmt.Sprint(n)
}

// TestEmbeddedKafkaPort gives the embedded broker a fixed port, in the job
// file (embedded_kafka.port) and then with --embedded-kafka-port, which
// wins: the summary lines show the address, and a Kafka client reaches
// the broker there. A port out of range, or jobs that give different ports,
// are exit 2.
func TestEmbeddedKafkaPort(t *testing.T) {
	if out, code := runCLI(t, nil, "validate", "-f", quickstart, "--set", "embedded_kafka.port=70000"); code != exitUsage ||
		!strings.Contains(out, "embedded_kafka.port") {
		t.Fatalf("validate embedded_kafka.port=70000: exit %d: %q", code, out)
	}
	dir := t.TempDir()
	// One runner has one broker: jobs that disagree on its port are refused.
	var files []string
	for i, src := range []string{quickstart, "testdata/orders.yaml"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, fmt.Sprintf("%d.yaml", i))
		if err := os.WriteFile(f, fmt.Appendf(b, "\nembedded_kafka: {port: %d}\n", 1111*(i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, "-f", f)
	}
	if _, stderr, code := runCLIErr(t, nil, append([]string{"run", "--data-dir", dir, "--http-address", "off"}, files...)...); code != exitUsage ||
		!strings.Contains(stderr, `jobs "quickstart" and "orders" name different embedded_kafka.port (1111, 2222)`) {
		t.Fatalf("jobs with different embedded_kafka.port: exit %d: %s", code, stderr)
	}
	yamlPort, flagPort := kafkatest.FreePort(t), kafkatest.FreePort(t)
	for _, c := range []struct {
		port int
		args []string
	}{
		{yamlPort, nil},
		{flagPort, []string{"--embedded-kafka-port", strconv.Itoa(flagPort)}},
	} {
		addr := fmt.Sprintf("127.0.0.1:%d", c.port)
		r := start(t, nil, append([]string{"run", "-f", quickstart, "--data-dir", dir, "--http-address", "off", "--summary", "1s",
			"--set", fmt.Sprintf("embedded_kafka.port=%d", yamlPort)}, c.args...)...)
		waitFor(t, r, 60*time.Second, "a summary line with embedded_kafka="+addr, func() bool {
			return strings.Contains(r.stderr.String(), "embedded_kafka="+addr)
		})
		cl := kafkatest.Client(t, []string{addr})
		ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
		err := cl.Ping(ctx)
		cancel()
		cl.Close()
		if err != nil {
			t.Fatalf("ping the embedded broker at %s: %v", addr, err)
		}
		stopGracefully(t, r)
	}
}
