package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cliCase is a command and what it must end with: the exit code and text
// its stderr must hold.
type cliCase struct {
	args   []string
	code   int
	stderr []string
}

func checkCLI(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, c := range cases {
		out, stderr, code := runCLIErr(t, nil, c.args...)
		ok := code == c.code
		for _, s := range c.stderr {
			ok = ok && strings.Contains(stderr, s)
		}
		if !ok {
			t.Errorf("runner %s: exit %d, want %d with %q; stdout %q, stderr %q", strings.Join(c.args, " "), code, c.code, c.stderr, out, stderr)
		}
	}
}

// TestAbuseDataDirNames points the commands at a data directory through
// the job file (-f, its data_dir, here set with --set as run takes it) and
// gives names that are not there: each is exit 2 naming the ones that are,
// while the runner runs (through its API) and once it stopped (from the
// files); the job file's one job and one table are the defaults.
func TestAbuseDataDirNames(t *testing.T) {
	dir := t.TempDir()
	file := []string{"-f", quickstart, "--set", "data_dir=" + dir}
	c := start(t, nil, append([]string{"run", "--http-address", "127.0.0.1:0", "--set", "source.datagen.count=300",
		"--set", "source.datagen.rate=1000"}, file...)...)
	waitFor(t, c, 60*time.Second, "the runner's HTTP server", func() bool { return liveRunner(dir) != "" })
	checkCLI(t, []cliCase{
		{args: append([]string{"table", "scan", "--table", "nope"}, file...), code: exitUsage,
			stderr: []string{`no table "nope" in the runner at `, "; tables: revenue"}},
		{args: append([]string{"checkpoints", "list", "--job", "nope"}, file...), code: exitUsage,
			stderr: []string{fmt.Sprintf(`no job "nope" in %s; jobs: quickstart`, dir)}},
	})
	waitFor(t, c, 60*time.Second, "a completed checkpoint", func() bool {
		out, code := runCLI(t, nil, append([]string{"checkpoints", "list"}, file...)...)
		return code == 0 && strings.Contains(out, " true ")
	})
	if out, code := runCLI(t, nil, append([]string{"table", "scan", "-o", "csv"}, file...)...); code != 0 ||
		!strings.HasPrefix(out, "region,revenue_cents,orders,largest,last_order\n") {
		t.Fatalf("table scan -f of the running runner: exit %d: %q", code, out)
	}
	if out, code := runCLI(t, nil, append([]string{"stop"}, file...)...); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("stop -f: exit %d: %q", code, out)
	}
	if code := c.exitCode(t, 60*time.Second); code != 0 {
		t.Fatalf("runner exit %d after stop, want 0; log:\n%s", code, c.stderr.String())
	}

	missing := filepath.Join(dir, "missing")
	checkCLI(t, []cliCase{
		{args: append([]string{"table", "scan", "--table", "nope"}, file...), code: exitUsage,
			stderr: []string{fmt.Sprintf(`no table "nope" in %s; tables: revenue`, dir)}},
		{args: append([]string{"table", "get", "--table", "nope", "--key", `{"region":"eu"}`}, file...), code: exitUsage,
			stderr: []string{fmt.Sprintf(`no table "nope" in %s; tables: revenue`, dir)}},
		{args: append([]string{"table", "forget", "--table", "nope", "--job", "quickstart"}, file...), code: exitUsage,
			stderr: []string{fmt.Sprintf(`no table "nope" in %s; tables: revenue`, dir)}},
		{args: append([]string{"checkpoints", "inspect", "latest", "--job", "nope"}, file...), code: exitUsage,
			stderr: []string{fmt.Sprintf(`no job "nope" in %s; jobs: quickstart`, dir)}},
		{args: append([]string{"checkpoints", "prune", "--keep", "1", "--job", "nope"}, file...), code: exitUsage,
			stderr: []string{fmt.Sprintf(`no job "nope" in %s; jobs: quickstart`, dir)}},
		{args: []string{"table", "scan", "--table", "revenue", "--data-dir", missing}, code: exitUsage,
			stderr: []string{fmt.Sprintf(`no table "revenue": the data directory %s does not exist`, missing)}},
		{args: []string{"checkpoints", "list", "--data-dir", missing}, code: exitUsage, stderr: []string{"give --job"}},
		{args: []string{"table", "scan", "--data-dir", dir, "--set", "data_dir=x"}, code: exitUsage, stderr: []string{"--set applies to job files"}},
		// --data-dir wins over the file's data_dir.
		{args: append([]string{"table", "scan", "--data-dir", missing}, file...), code: exitUsage,
			stderr: []string{fmt.Sprintf(`no table "revenue": the data directory %s does not exist`, missing)}},
	})
	for _, args := range [][]string{
		{"checkpoints", "inspect", "latest"},
		{"checkpoints", "prune", "--keep", "1"},
	} {
		if out, code := runCLI(t, nil, append(args, file...)...); code != 0 {
			t.Errorf("runner %s -f: exit %d: %q", strings.Join(args, " "), code, out)
		}
	}
	out, code := runCLI(t, nil, append([]string{"table", "scan", "-o", "json"}, file...)...)
	if code != 0 {
		t.Fatalf("table scan -f of the stopped runner: exit %d", code)
	}
	rows := jsonRows(t, out, "region")
	if got, want := fmt.Sprint(rows), fmt.Sprint(scanJSON(t, dir, "revenue", "region")); got != want || len(rows) != 3 {
		t.Fatalf("table scan -f: %v; with --data-dir and --table: %v", got, want)
	}
}

// TestAbuseDataDirInUse runs commands that need the data directory to
// themselves while a runner holds it: each says which runner (its pid, and
// its HTTP address when it serves) and how to stop it.
func TestAbuseDataDirInUse(t *testing.T) {
	for _, http := range []bool{true, false} {
		t.Run(fmt.Sprintf("http=%v", http), func(t *testing.T) {
			dir := t.TempDir()
			addr := "off"
			if http {
				addr = "127.0.0.1:0"
			}
			c := start(t, nil, "run", "-f", quickstart, "--data-dir", dir, "--http-address", addr)
			waitFor(t, c, 60*time.Second, "a completed checkpoint", func() bool {
				out, code := runCLI(t, nil, "checkpoints", "list", "--data-dir", dir, "--job", "quickstart")
				return code == 0 && strings.Contains(out, " true ")
			})
			want := []string{fmt.Sprintf("the data directory %s is in use by process %d", dir, c.cmd.Process.Pid), "stop the runner first"}
			if http {
				waitFor(t, c, 60*time.Second, "the runner's HTTP server", func() bool { return liveRunner(dir) != "" })
				want = []string{fmt.Sprintf("the data directory %s is in use by a running runner (pid %d, http %s): stop it first with `runner stop --data-dir %s`",
					dir, c.cmd.Process.Pid, liveRunner(dir), dir)}
			}
			cases := []cliCase{
				{args: []string{"table", "forget", "--data-dir", dir, "--table", "revenue", "--job", "gone"}, code: exitFailure, stderr: want},
				{args: []string{"checkpoints", "prune", "--data-dir", dir, "--job", "quickstart", "--keep", "1"}, code: exitFailure, stderr: want},
				{args: []string{"run", "-f", quickstart, "--data-dir", dir, "--http-address", "off"}, code: exitFailure, stderr: want},
			}
			if !http { // else it reads through the runner's API
				cases = append(cases, cliCase{args: []string{"table", "scan", "--data-dir", dir, "--table", "revenue"}, code: exitFailure, stderr: want})
			}
			checkCLI(t, cases)
			stopGracefully(t, c)
		})
	}
}
