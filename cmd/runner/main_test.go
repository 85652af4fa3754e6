package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/syncbuf"
)

// childEnv makes the test binary run as the runner (see TestMain), so the
// tests exercise the real command line in a process of its own.
const childEnv = "EBBFLOW_RUNNER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		testOptions.SyncTableWrites = os.Getenv(syncWritesEnv) == "1"
		testOptions.UnsafeSkipUndo = os.Getenv(skipUndoEnv) == "1"
		testOptions.UnsafeOwnerLogIDPerInstance = os.Getenv(unfencedOwnersEnv) == "1"
		testOptions.TableMinFreeBytes, _ = strconv.ParseUint(os.Getenv(tableMinFreeEnv), 10, 64)
		os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// child is a runner process.
type child struct {
	cmd    *exec.Cmd
	stdout *syncbuf.Buffer
	stderr *syncbuf.Buffer
	done   chan struct{}
	err    error
}

// start runs the runner with args and env in the background.
func start(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	return startCmd(t, cmd)
}

// startCmd starts cmd in the background as a child, killed at the test's
// end if it still runs.
func startCmd(t *testing.T, cmd *exec.Cmd) *child {
	t.Helper()
	c := &child{cmd: cmd, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.stdout, c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

// exitCode waits for the child and returns its exit code.
func (c *child) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		t.Fatalf("runner did not exit within %s; log:\n%s", timeout, c.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		return ee.ExitCode()
	}
	if c.err != nil {
		t.Fatal(c.err)
	}
	return 0
}

// runCLI runs a short runner command and returns its stdout and exit code.
func runCLI(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	stdout, _, code := runCLIErr(t, env, args...)
	return stdout, code
}

// runCLIErr runs a short runner command and returns its stdout, stderr and
// exit code.
func runCLIErr(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 0 && testing.Verbose() {
		t.Logf("runner %s: exit %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String(), stderr.String(), code
}

// scanJSON runs "table scan -o json" and returns the rows by the value of
// column key.
func scanJSON(t *testing.T, dataDir, table, key string) map[string]map[string]any {
	t.Helper()
	out, code := runCLI(t, nil, "table", "scan", "--data-dir", dataDir, "--table", table, "-o", "json")
	if code != 0 {
		t.Fatalf("table scan: exit %d", code)
	}
	return jsonRows(t, out, key)
}

// jsonRows parses the output of "table scan -o json" into the rows by the
// value of column key.
func jsonRows(t *testing.T, out, key string) map[string]map[string]any {
	t.Helper()
	rows := map[string]map[string]any{}
	for line := range strings.Lines(out) {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		rows[fmt.Sprint(m[key])] = m
	}
	return rows
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, c *child, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-c.done:
			t.Fatalf("runner exited while waiting for %s: %v; log:\n%s", what, c.err, c.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; log:\n%s", what, c.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopGracefully sends SIGTERM and expects exit 0.
func stopGracefully(t *testing.T, c *child) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := c.exitCode(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; log:\n%s", code, c.stderr.String())
	}
}

func TestValidate(t *testing.T) {
	out, code := runCLI(t, nil, "validate", "-f", "testdata/broken.yaml", "-o", "json")
	if code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	var got struct {
		Problems []struct {
			Line, Column int
			Path         string
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if errs := got.Problems; len(errs) != 2 || errs[0].Path != "sink.table.primary_key[0]" || errs[0].Line != 9 || errs[0].Column != 19 ||
		errs[1].Path != "sink.table.columns.total.agg" {
		t.Fatalf("errors %+v", got.Problems)
	}
	if _, code := runCLI(t, nil, "validate", "-f", "testdata/orders.yaml"); code != 0 {
		t.Fatalf("valid file: exit %d", code)
	}
	if _, code := runCLI(t, nil, "run", "-f", "testdata/broken.yaml"); code != exitUsage {
		t.Fatalf("run of a broken file: exit %d, want %d", code, exitUsage)
	}
	if _, code := runCLI(t, nil, "table", "scan", "--nope"); code != exitUsage {
		t.Fatalf("unknown flag: exit %d, want %d", code, exitUsage)
	}
}

// TestValidateChangelogCluster: validate says, in text and JSON, where each
// changelog goes: a changelog without brokers on the Kafka source's
// cluster, one of a datagen job on the embedded broker.
func TestValidateChangelogCluster(t *testing.T) {
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	const jobs = `job: {name: a}
source: {kafka: {brokers: ["x1:9092", "x2:9092"], topics: [in], schema: {k: string}}}
sink: {table: {name: ta, primary_key: [k], columns: {n: {agg: count}}, changelog: {}}}
---
job: {name: b}
source: {datagen: {fields: {k: {one_of: [a]}}}}
sink: {table: {name: tb, primary_key: [k], columns: {n: {agg: count}}, changelog: {topic: out}}}
`
	if err := os.WriteFile(file, []byte(jobs), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, nil, "validate", "-f", file)
	if code != 0 || !strings.Contains(out, `changelog of table "ta": topic "a-ta-changelog" on x1:9092,x2:9092`) ||
		!strings.Contains(out, `changelog of table "tb": topic "out" on embedded`) {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	out, code = runCLI(t, nil, "validate", "-f", file, "-o", "json")
	var got struct {
		Problems   []any
		Changelogs []struct{ File, Job, Table, Topic, Cluster string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	if len(got.Problems) != 0 || len(got.Changelogs) != 2 || got.Changelogs[0].Cluster != "x1:9092,x2:9092" ||
		got.Changelogs[0].Job != "a" || got.Changelogs[1].Cluster != "embedded" || got.Changelogs[1].Topic != "out" {
		t.Fatalf("validate -o json: %s", out)
	}
}

// TestRestoreMissingCheckpoint asks for a checkpoint that does not exist:
// exit 3, before anything reads.
func TestRestoreMissingCheckpoint(t *testing.T) {
	dir := t.TempDir()
	c := start(t, nil, "run", "-f", "../../examples/quickstart/job.yaml", "--data-dir", dir, "--http-address", "off",
		"--from-checkpoint", "99")
	if code := c.exitCode(t, 60*time.Second); code != exitRestore {
		t.Fatalf("exit %d, want %d; log:\n%s", code, exitRestore, c.stderr.String())
	}
}

// liveRunner returns the HTTP address of the runner using dataDir, if it
// answers.
func liveRunner(dataDir string) string {
	e, err := findRunner(dataDir, "")
	if err != nil || e == nil {
		return ""
	}
	return e.addr
}
