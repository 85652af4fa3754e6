package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestAPI runs the visitors example and goes through the HTTP endpoints,
// stops it with "runner stop", and reads its checkpoints with the CLI.
func TestAPI(t *testing.T) {
	dir := t.TempDir()
	c := start(t, nil, "run", "-f", "../../examples/visitors/job.yaml", "--data-dir", dir, "--http-address", "127.0.0.1:0",
		"--set", "checkpoint.interval=100ms", "--summary", "0", "--log-format", "json")
	var addr string
	waitFor(t, c, 30*time.Second, "the runner's address", func() bool { addr = liveRunner(dir); return addr != "" })
	base := "http://" + addr
	if code, _ := httpGet(t, base+"/livez"); code != http.StatusOK {
		t.Fatalf("livez %d", code)
	}
	waitFor(t, c, 30*time.Second, "readyz 200", func() bool {
		code, body := httpGet(t, base+"/readyz")
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("readyz %d: %s", code, body)
		}
		return code == http.StatusOK && strings.Contains(body, `"phase": "running"`)
	})
	// Ready: the one job of the one; no "progress" that reads as a restore's.
	var ready map[string]any
	if _, body := httpGet(t, base+"/readyz"); json.Unmarshal([]byte(body), &ready) != nil || ready["jobs_ready"] != 1.0 ||
		ready["jobs_total"] != 1.0 || ready["progress"] != nil {
		t.Fatalf("readyz: %s", body)
	}
	_, metrics := httpGet(t, base+"/metrics")
	for _, want := range []string{"ebbflow_build_info{", `ebbflow_table_rows{table="page_visitors"}`,
		`ebbflow_operator_records_in_total{job="visitors",operator="datagen"}`, `ebbflow_checkpoints_total{job="visitors",status="completed"}`,
		"go_goroutines", "process_resident_memory_bytes", `ebbflow_job_ready{job="visitors"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	var jobs []jobStatus
	_, body := httpGet(t, base+"/api/v1/jobs")
	if err := json.Unmarshal([]byte(body), &jobs); err != nil || len(jobs) != 1 || jobs[0].Name != "visitors" || jobs[0].Phase != "running" ||
		jobs[0].LastCheckpoint == nil {
		t.Fatalf("jobs %s (%v)", body, err)
	}
	// The runtime's status: running, checkpoints of this run, the datagen
	// subtask's records read.
	js := jobs[0]
	if js.State != "running" || js.Checkpoints < 1 || js.LastCompleted == nil || js.LastCompleted.ID != *js.LastCheckpoint ||
		js.LastCompleted.DurationMS == nil || js.LastCompleted.Completed.Before(js.LastCompleted.Triggered) ||
		js.LastCompleted.SizeBytes == nil || *js.LastCompleted.SizeBytes == 0 {
		t.Fatalf("job status %s", body)
	}
	var read int64
	for _, ts := range js.Tasks {
		if len(ts.Operators) > 0 && ts.Operators[0] == "datagen" {
			read += ts.RecordsIn
			if ts.State != "running" {
				t.Fatalf("datagen subtask %+v, want running", ts)
			}
		}
	}
	if read == 0 {
		t.Fatalf("no records read by datagen in %s", body)
	}
	var cps []checkpointInfo
	_, body = httpGet(t, base+"/api/v1/jobs/visitors/checkpoints")
	if err := json.Unmarshal([]byte(body), &cps); err != nil || len(cps) == 0 || !cps[0].Completed {
		t.Fatalf("checkpoints %s (%v)", body, err)
	}
	if code, _ := httpGet(t, base+"/api/v1/jobs/nope/checkpoints"); code != http.StatusNotFound {
		t.Errorf("checkpoints of an unknown job: %d", code)
	}
	var tables []tableInfo
	_, body = httpGet(t, base+"/api/v1/tables")
	if err := json.Unmarshal([]byte(body), &tables); err != nil || len(tables) != 1 || tables[0].Name != "page_visitors" || len(tables[0].Columns) != 3 {
		t.Fatalf("tables %s (%v)", body, err)
	}
	waitFor(t, c, 30*time.Second, "a row for home", func() bool {
		_, body := httpGet(t, base+`/api/v1/tables/page_visitors/rows?key={"page":"home"}`)
		return strings.HasPrefix(body, `{"page":"home","visitors":`)
	})
	if code, _ := httpGet(t, base+`/api/v1/tables/page_visitors/rows?key={"nope":1}`); code != http.StatusBadRequest {
		t.Errorf("rows of a bad key: %d", code)
	}
	out, code := runCLI(t, nil, "table", "get", "--data-dir", dir, "--table", "page_visitors", "--key", `{"page":"home"}`, "-o", "csv")
	if code != 0 || !strings.HasPrefix(out, "page,visitors,visitors_approx,views\nhome,") {
		t.Fatalf("table get through the runner: exit %d: %q", code, out)
	}

	if out, code := runCLI(t, nil, "stop", "--data-dir", dir); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("stop: exit %d: %s", code, out)
	}
	if code := c.exitCode(t, 30*time.Second); code != 0 {
		t.Fatalf("runner exit %d after stop; log:\n%s", code, c.stderr.String())
	}
	if !strings.Contains(c.stderr.String(), `"msg":"stopping: taking a final checkpoint"`) {
		t.Errorf("no JSON log line of the stop:\n%s", c.stderr.String())
	}

	out, code = runCLI(t, nil, "checkpoints", "list", "--data-dir", dir, "--job", "visitors")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := strings.Fields(lines[len(lines)-1]); code != 0 || len(lines) < 2 || len(last) != 4 || last[1] != "true" || last[3] != "true" {
		t.Fatalf("checkpoints list: exit %d:\n%s", code, out)
	}
	out, code = runCLI(t, nil, "checkpoints", "inspect", "latest", "--data-dir", dir, "--job", "visitors")
	if code != 0 || !strings.Contains(out, `"final": true`) || !strings.Contains(out, `"page_visitors"`) {
		t.Fatalf("checkpoints inspect: exit %d:\n%s", code, out)
	}
	if _, code := runCLI(t, nil, "checkpoints", "prune", "--keep", "1", "--data-dir", dir, "--job", "visitors"); code != 0 {
		t.Fatalf("prune: exit %d", code)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "jobs", "visitors", "checkpoints"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("after prune --keep 1: %v %v", ents, err)
	}
	out, code = runCLI(t, nil, "table", "scan", "--data-dir", dir, "--table", "page_visitors")
	if code != 0 || len(strings.Split(strings.TrimSpace(out), "\n")) != 6 {
		t.Fatalf("table scan of the stopped runner: exit %d:\n%s", code, out)
	}
}

// TestShutdownTimeout stops a runner whose shutdown timeout cannot be met:
// the jobs are cancelled (state at the last checkpoint) and the exit code
// is 1.
func TestShutdownTimeout(t *testing.T) {
	dir := t.TempDir()
	c := start(t, nil, "run", "-f", "../../examples/visitors/job.yaml", "--data-dir", dir, "--http-address", "127.0.0.1:0",
		"--set", "shutdown_timeout=1ns", "--summary", "0")
	waitFor(t, c, 30*time.Second, "the runner's address", func() bool { return liveRunner(dir) != "" })
	if err := c.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := c.exitCode(t, 30*time.Second); code != exitFailure || !strings.Contains(c.stderr.String(), "shutdown timeout") {
		t.Fatalf("exit %d, want %d after the shutdown timeout; log:\n%s", code, exitFailure, c.stderr.String())
	}
}

// TestIncompatibleTable runs a bounded job to its end (exit 0), then the
// same job writing one more column: the table's schema is fixed, exit 3.
func TestIncompatibleTable(t *testing.T) {
	dir := t.TempDir()
	args := []string{"run", "-f", "../../examples/latency/job.yaml", "--data-dir", dir, "--http-address", "off",
		"--set", "source.datagen.count=500", "--set", "source.datagen.rate=0"}
	if c := start(t, nil, args...); c.exitCode(t, 60*time.Second) != 0 {
		t.Fatalf("bounded job: log:\n%s", c.stderr.String())
	}
	out, code := runCLI(t, nil, "table", "scan", "--data-dir", dir, "--table", "endpoint_latency", "-o", "json")
	if code != 0 || !strings.Contains(out, `"requests":`) {
		t.Fatalf("scan: exit %d: %s", code, out)
	}
	c := start(t, nil, append(args, "--set", "sink.table.columns.extra={agg: count}")...)
	if code := c.exitCode(t, 60*time.Second); code != exitRestore {
		t.Fatalf("exit %d, want %d; log:\n%s", code, exitRestore, c.stderr.String())
	}
}

// TestForgetRenamedJob: a job renamed in its file still finds its old name
// registered with the table, claiming the same columns; the runner warns
// of it and refuses the conflict, and `table forget` releases the old job
// so the renamed one runs.
func TestForgetRenamedJob(t *testing.T) {
	dir := t.TempDir()
	args := []string{"run", "-f", "../../examples/latency/job.yaml", "--data-dir", dir, "--http-address", "off",
		"--set", "source.datagen.count=500", "--set", "source.datagen.rate=0"}
	if c := start(t, nil, args...); c.exitCode(t, 60*time.Second) != 0 {
		t.Fatalf("bounded job: log:\n%s", c.stderr.String())
	}
	renamed := append(slices.Clone(args), "--set", "job.name=latency2")
	c := start(t, nil, renamed...)
	if code := c.exitCode(t, 60*time.Second); code != exitRestore || !strings.Contains(c.stderr.String(), "target columns overlap another job's writer") {
		t.Fatalf("exit %d, want %d: a column conflict naming both jobs; log:\n%s", code, exitRestore, c.stderr.String())
	}
	if log := c.stderr.String(); !strings.Contains(log, "runner table forget --table endpoint_latency --job latency") {
		t.Fatalf("no warning names the old job and the command; log:\n%s", log)
	}
	out, code := runCLI(t, nil, "table", "forget", "--data-dir", dir, "--table", "endpoint_latency", "--job", "latency")
	if code != 0 || !strings.Contains(out, `job "latency" released from table "endpoint_latency"`) {
		t.Fatalf("forget: exit %d: %s", code, out)
	}
	if _, code := runCLI(t, nil, "table", "forget", "--data-dir", dir, "--table", "endpoint_latency", "--job", "latency"); code != exitUsage {
		t.Fatalf("forgetting twice: exit %d, want %d", code, exitUsage)
	}
	if c := start(t, nil, renamed...); c.exitCode(t, 60*time.Second) != 0 {
		t.Fatalf("the renamed job after forget: log:\n%s", c.stderr.String())
	}
}
