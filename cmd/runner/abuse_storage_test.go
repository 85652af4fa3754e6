package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/ebbflow/ebbflow/internal/damage"
	"github.com/ebbflow/ebbflow/pipelines/build"
)

// tableMinFreeEnv sets, in a runner child, the free space its tables keep
// in reserve (build.Options.TableMinFreeBytes): more than any disk has
// makes the data directory look full to them.
const tableMinFreeEnv = "EBBFLOW_TEST_TABLE_MIN_FREE"

// quickstartRun returns the arguments that run the quickstart job in dir
// with a generator of count orders at rate per second, and the exact table.
func quickstartRun(t *testing.T, dir string, count, rate int) ([]string, map[string]map[string]any) {
	t.Helper()
	sets := []string{fmt.Sprintf("source.datagen.count=%d", count), fmt.Sprintf("source.datagen.rate=%d", rate)}
	want, _ := quickstartOracle(t, sets, int64(count))
	args := []string{"run", "-f", quickstart, "--data-dir", dir, "--http-address", "127.0.0.1:0", "--summary", "0"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args, want
}

// stoppedQuickstart runs the quickstart with a bounded generator until
// every paid order is in the table, stops it gracefully and returns the
// data directory and the orders the table holds.
func stoppedQuickstart(t *testing.T) (dir, orders string) {
	t.Helper()
	dir = t.TempDir()
	args, want := quickstartRun(t, dir, 600, 2000)
	c := start(t, nil, args...)
	waitFor(t, c, 60*time.Second, "every paid order in the table", func() bool {
		return liveRunner(dir) != "" && totalOrders(scanJSON(t, dir, "revenue", "region")) == totalOrders(want)
	})
	stopGracefully(t, c)
	return dir, totalOrders(want)
}

// wantOneLine checks that a failed command said why in one "runner:" line
// naming every one of names, without a Go stack or pebble's own output.
func wantOneLine(t *testing.T, what, stderr string, names ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "runner: ") || strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, ".go:") {
		t.Fatalf("%s: stderr is not one runner line:\n%s", what, stderr)
	}
	for _, n := range names {
		if !strings.Contains(last, n) {
			t.Errorf("%s: %q does not name %q", what, last, n)
		}
	}
}

// TestAbuseTruncatedWAL truncates the write-ahead log of a stopped
// runner's table, whose tail pebble silently cuts: "table scan" refuses the
// table (exit 3) naming the WAL, the bucket and the offsets, prints what is
// left only with --allow-lost-writes and a warning, and "run" refuses it too.
func TestAbuseTruncatedWAL(t *testing.T) {
	dir, orders := stoppedQuickstart(t)
	tableDir := build.TableDir(dir, "revenue")
	wal := damage.Newest(t, tableDir, ".log")
	damage.Rewrite(t, wal, func(raw []byte) []byte { return raw[:len(raw)/2] })
	_, stderr, code := runCLIErr(t, nil, "table", "scan", "--data-dir", dir, "--table", "revenue", "-o", "json")
	if code != exitRestore {
		t.Fatalf("table scan of a table that lost synced writes: exit %d, want %d; stderr:\n%s", code, exitRestore, stderr)
	}
	wantOneLine(t, "table scan", stderr, tableDir, filepath.Base(wal), "lost synced writes", "bucket ", "synced up to ")

	out, stderr, code := runCLIErr(t, nil, "table", "scan", "--data-dir", dir, "--table", "revenue", "-o", "json", "--allow-lost-writes")
	if code != 0 || !strings.Contains(stderr, "WARNING") || !strings.Contains(stderr, "lost synced writes") {
		t.Fatalf("table scan --allow-lost-writes: exit %d, stderr:\n%s", code, stderr)
	}
	rows := map[string]map[string]any{}
	for line := range strings.Lines(out) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		rows[fmt.Sprint(m["region"])] = m
	}
	if left := totalOrders(rows); left == orders {
		t.Fatalf("the damaged table still holds all %s orders: the test did not cut the log", orders)
	}

	c := start(t, nil, "run", "-f", quickstart, "--data-dir", dir, "--http-address", "off", "--summary", "0")
	if code := c.exitCode(t, 60*time.Second); code != exitRestore {
		t.Fatalf("run on a table that lost synced writes: exit %d, want %d; log:\n%s", code, exitRestore, c.stderr.String())
	}
	if !strings.Contains(c.stderr.String(), "runner: ") || !strings.Contains(c.stderr.String(), "lost synced writes") {
		t.Fatalf("run: no runner line about the lost writes; log:\n%s", c.stderr.String())
	}
}

// TestAbuseCorruptSST flips bytes in an sstable of a stopped runner's
// table: "table scan" and "run" end with one "runner:" line naming the file
// and exit 3, instead of pebble's fatal logger's stack dump.
func TestAbuseCorruptSST(t *testing.T) {
	dir, _ := stoppedQuickstart(t)
	tableDir := build.TableDir(dir, "revenue")
	// The quickstart's table is small: flush its memtable into an sstable.
	db, err := pebble.Open(tableDir, &pebble.Options{Logger: testLogger{t}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sst := damage.Newest(t, tableDir, ".sst")
	damage.Scribble(t, sst)
	_, stderr, code := runCLIErr(t, nil, "table", "scan", "--data-dir", dir, "--table", "revenue")
	if code != exitRestore {
		t.Fatalf("table scan of a corrupt sstable: exit %d, want %d; stderr:\n%s", code, exitRestore, stderr)
	}
	wantOneLine(t, "table scan", stderr, sst, "corrupt")

	c := start(t, nil, "run", "-f", quickstart, "--data-dir", dir, "--http-address", "off", "--summary", "0")
	if code := c.exitCode(t, 60*time.Second); code != exitRestore {
		t.Fatalf("run on a corrupt sstable: exit %d, want %d; log:\n%s", code, exitRestore, c.stderr.String())
	}
	if log := c.stderr.String(); !strings.Contains(log, "runner: ") || !strings.Contains(log, sst) || strings.Contains(log, "goroutine ") {
		t.Fatalf("run: no runner line naming %s, or a stack; log:\n%s", sst, log)
	}
}

// testLogger sends pebble's messages to the test log.
type testLogger struct{ t *testing.T }

func (l testLogger) Infof(format string, args ...any)  { l.t.Logf(format, args...) }
func (l testLogger) Errorf(format string, args ...any) { l.t.Logf(format, args...) }
func (l testLogger) Fatalf(format string, args ...any) { l.t.Fatalf(format, args...) }

// TestAbuseDiskFull runs the quickstart, stops it half way, restarts it on
// a data directory whose tables find it full (their reserve is more than
// the disk has): the runner exits 1 with one "runner:" line naming the
// table's directory and the write, without a Go stack. Restarted with the
// space "freed", it finishes with exactly the totals of the input, while
// /readyz warns about the free space and /metrics exports it.
func TestAbuseDiskFull(t *testing.T) {
	dir := t.TempDir()
	args, want := quickstartRun(t, dir, 800, 400)
	c := start(t, nil, args...)
	waitFor(t, c, 60*time.Second, "some orders in the table", func() bool {
		return liveRunner(dir) != "" && totalOrders(scanJSON(t, dir, "revenue", "region")) != "0"
	})
	stopGracefully(t, c)
	if got := totalOrders(scanJSON(t, dir, "revenue", "region")); got == totalOrders(want) {
		t.Fatalf("the first run wrote all %s orders: stop it earlier", got)
	}

	c = start(t, []string{tableMinFreeEnv + "=" + fmt.Sprint(uint64(1)<<62)}, args...)
	if code := c.exitCode(t, 60*time.Second); code != exitFailure {
		t.Fatalf("run on a full disk: exit %d, want %d; log:\n%s", code, exitFailure, c.stderr.String())
	}
	wantOneLine(t, "run on a full disk", c.stderr.String(), build.TableDir(dir, "revenue"), "apply batch", "bytes free", "reserve")

	c = start(t, nil, append(args, "--min-free-space", fmt.Sprint(uint64(1)<<62))...)
	var addr string
	waitFor(t, c, 60*time.Second, "the runner's address", func() bool { addr = liveRunner(dir); return addr != "" })
	if _, body := httpGet(t, "http://"+addr+"/readyz"); !strings.Contains(body, `"warnings"`) || !strings.Contains(body, "below --min-free-space") {
		t.Errorf("/readyz without a free-space warning: %s", body)
	}
	if _, metrics := httpGet(t, "http://"+addr+"/metrics"); !strings.Contains(metrics, "ebbflow_data_dir_free_bytes{") {
		t.Errorf("/metrics has no ebbflow_data_dir_free_bytes")
	}
	waitFor(t, c, 60*time.Second, "every paid order in the table", func() bool {
		return totalOrders(scanJSON(t, dir, "revenue", "region")) == totalOrders(want)
	})
	stopGracefully(t, c)
	got := scanJSON(t, dir, "revenue", "region")
	for region, w := range want {
		for _, col := range []string{"revenue_cents", "orders", "largest"} {
			if fmt.Sprint(got[region][col]) != fmt.Sprint(w[col]) {
				t.Errorf("region %s %s = %v, want %v", region, col, got[region][col], w[col])
			}
		}
	}
}
