package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadmeQuickstart follows the README's quick start as a newcomer does,
// on a git clone of HEAD, with the commands of the README's blocks marked
// `<!-- readme-test: NAME -->`, so that editing them changes what is
// tested: build the binary ("build"), run the quickstart ("run") a few
// seconds and stop it with SIGINT (exit 0), look at the table and its
// changelog ("inspect"), whose replay must be the table; run it again: it
// restores its last checkpoint, carries on (a later checkpoint, more
// orders) and the table is still the changelog replayed; a broken job file
// is exit 2 ("validate"). Uncommitted changes are not in the clone.
func TestReadmeQuickstart(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(t.TempDir(), "ebbflow")
	head := strings.TrimSpace(git(t, root, "rev-parse", "HEAD"))
	git(t, root, "clone", "--quiet", "--no-checkout", root, clone)
	git(t, clone, "checkout", "--quiet", "--detach", head)
	if dirty := git(t, root, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		t.Logf("testing HEAD %s; not in it:\n%s", head, dirty)
	}
	blocks := readmeBlocks(t, filepath.Join(clone, "README.md"))

	for _, line := range blocks["build"] {
		began := time.Now()
		if out, code := readmeCmd(t, clone, line); code != 0 {
			t.Fatalf("README build step %q: exit %d:\n%s", line, code, out)
		}
		t.Logf("%s: %s", line, time.Since(began).Round(time.Second))
	}

	if len(blocks["run"]) != 1 {
		t.Fatalf("README block run: %q, want one command", blocks["run"])
	}
	run := blocks["run"][0]
	fields := strings.Fields(run)
	bin, jobFile := fields[0], ""
	if i := slices.Index(fields, "-f"); i > 0 && i+1 < len(fields) {
		jobFile = fields[i+1]
	}
	if jobFile == "" {
		t.Fatalf("README run command %q gives no job file (-f)", run)
	}
	inspect := blocks["inspect"]
	if len(inspect) != 2 || !strings.Contains(inspect[0], " table scan ") || !strings.Contains(inspect[1], " changelog tail ") {
		t.Fatalf("README block inspect: %q, want table scan and changelog tail", inspect)
	}
	tailN := regexp.MustCompile(` -n (\d+)\b`).FindStringSubmatch(inspect[1])
	if tailN == nil {
		t.Fatalf("README changelog tail %q has no -n N", inspect[1])
	}
	// The changelog replay needs every record: the same command with
	// --from-start instead of -n N; the table as JSON: with -o json.
	scanJSON := inspect[0] + " -o json"
	tailAll := strings.Replace(inspect[1], tailN[0], " --from-start", 1)
	// latest is the id of the latest completed checkpoint, -1 before the
	// first, or when the command fails (the data directory is not there yet).
	latest := func() (int, string) {
		out, code := readmeCmd(t, clone, bin+" checkpoints list -f "+jobFile)
		if code != 0 {
			return -1, fmt.Sprintf("checkpoints list: exit %d:\n%s", code, out)
		}
		id := -1
		for line := range strings.Lines(out) {
			if f := strings.Fields(line); len(f) >= 2 && f[1] == "true" {
				n, err := strconv.Atoi(f[0])
				if err != nil {
					t.Fatalf("checkpoints list line %q: %v", line, err)
				}
				id = max(id, n)
			}
		}
		return id, ""
	}

	// One run a few seconds long: it stops once it completed two
	// checkpoints past the one it began from and its table holds more
	// orders than before.
	prevOrders, prevCheckpoint := int64(0), -1
	for i := range 2 {
		// Any free port for the HTTP API, not the README's 8081 that
		// another runner on the machine may use.
		c := startCmd(t, readmeExec(clone, run+" --http-address 127.0.0.1:0"))
		waitFor(t, c, 60*time.Second, "two checkpoints and new orders in the table", func() bool {
			if id, _ := latest(); id < prevCheckpoint+2 {
				return false
			}
			out, code := readmeCmd(t, clone, scanJSON) // the runner is up: it must answer
			if code != 0 {
				t.Fatalf("%s: exit %d:\n%s", scanJSON, code, out)
			}
			return orderCount(t, out) > prevOrders
		})
		if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code := c.exitCode(t, 60*time.Second); code != 0 {
			t.Fatalf("run %d: exit %d after SIGINT, want 0; log:\n%s", i, code, c.stderr.String())
		}
		if restored := regexp.MustCompile(fmt.Sprintf(`msg=restoring .*checkpoint=chk-%d\n`, prevCheckpoint)); i > 0 && !restored.MatchString(c.stderr.String()) {
			t.Fatalf("run %d did not restore checkpoint %d; log:\n%s", i, prevCheckpoint, c.stderr.String())
		}

		// The README's commands as they are: a table of regions, and the
		// latest N changelog records of the table.
		if out, code := readmeCmd(t, clone, inspect[0]); code != 0 || !strings.HasPrefix(out, "region ") || strings.Count(out, "\n") < 2 {
			t.Fatalf("%s: exit %d:\n%s", inspect[0], code, out)
		}
		out, code := readmeCmd(t, clone, inspect[1])
		if n, _ := strconv.Atoi(tailN[1]); code != 0 || strings.Count(out, `"ebbflow.table":"revenue"`) != n || strings.Count(out, "\n") != n {
			t.Fatalf("%s: exit %d, want %d records:\n%s", inspect[1], code, n, out)
		}
		table, code := readmeCmd(t, clone, scanJSON)
		if code != 0 {
			t.Fatalf("%s: exit %d:\n%s", scanJSON, code, table)
		}
		changelog, code := readmeCmd(t, clone, tailAll)
		if code != 0 {
			t.Fatalf("%s: exit %d:\n%s", tailAll, code, changelog)
		}
		checkReplay(t, table, changelog)
		orders := orderCount(t, table)
		checkpoint, failed := latest()
		if failed != "" {
			t.Fatal(failed)
		}
		if orders <= prevOrders || checkpoint <= prevCheckpoint+1 {
			t.Fatalf("run %d: %d orders after checkpoint %d, want more than %d after %d", i, orders, checkpoint, prevOrders, prevCheckpoint)
		}
		t.Logf("run %d: %d orders at checkpoint %d, %d changelog records", i, orders, checkpoint, strings.Count(changelog, "\n"))
		prevOrders, prevCheckpoint = orders, checkpoint
	}

	if len(blocks["validate"]) != 1 {
		t.Fatalf("README block validate: %q, want one command", blocks["validate"])
	}
	if out, code := readmeCmd(t, clone, blocks["validate"][0]); code != exitUsage || !strings.Contains(out, "broken.yaml:9:19: sink.table.primary_key[0]") {
		t.Fatalf("%s: exit %d, want %d with positions:\n%s", blocks["validate"][0], code, exitUsage, out)
	}
}

// readmeBlocks returns the commands of each block of the README marked
// `<!-- readme-test: NAME -->` (on the line before its fence), one a line,
// without blank lines and comments.
func readmeBlocks(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]string{}
	lines := strings.Split(string(b), "\n")
	marker := regexp.MustCompile(`^<!-- readme-test: ([a-z]+) -->$`)
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("%s:%d: marker %q is not followed by a fenced block", path, i+1, lines[i])
		}
		i += 2
		for ; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "#") {
				blocks[m[1]] = append(blocks[m[1]], l)
			}
		}
	}
	for _, name := range []string{"build", "run", "inspect", "validate"} {
		if len(blocks[name]) == 0 {
			t.Fatalf("%s: no block marked readme-test: %s", path, name)
		}
	}
	return blocks
}

// readmeExec is the shell running line in dir, exec'ing its command so
// that a signal to the process reaches it.
func readmeExec(dir, line string) *exec.Cmd {
	cmd := exec.Command("bash", "-c", "exec "+line)
	cmd.Dir = dir
	return cmd
}

// readmeCmd runs line in dir and returns its stdout (followed by its
// stderr when it fails) and exit code.
func readmeCmd(t *testing.T, dir, line string) (string, int) {
	t.Helper()
	cmd := readmeExec(dir, line)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return stdout.String() + stderr.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", line, err)
	}
	return stdout.String(), 0
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("git %s in %s: %v: %s", strings.Join(args, " "), dir, err, ee.Stderr)
		}
		t.Fatalf("git %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	return string(out)
}

// orderCount sums the column orders of "table scan -o json" output.
func orderCount(t *testing.T, out string) int64 {
	t.Helper()
	var n int64
	for line := range strings.Lines(out) {
		var row struct{ Orders int64 }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("table scan line %q: %v", line, err)
		}
		n += row.Orders
	}
	return n
}

// checkReplay replays the upsert-json changelog (changelog tail
// --from-start: the last value of each key; a null value deletes it) and
// compares it with the rows of "table scan -o json".
func checkReplay(t *testing.T, table, changelog string) {
	t.Helper()
	canon := func(v any) string {
		b, err := json.Marshal(v) // maps marshal sorted by key
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	decode := func(line string, v any) {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
	}
	replay := map[string]string{} // key → row
	var keyCols []string
	for line := range strings.Lines(changelog) {
		var rec struct {
			Key   map[string]any
			Value map[string]any
		}
		decode(line, &rec)
		if keyCols == nil {
			for k := range rec.Key {
				keyCols = append(keyCols, k)
			}
		}
		if rec.Value == nil {
			delete(replay, canon(rec.Key))
		} else {
			replay[canon(rec.Key)] = canon(rec.Value)
		}
	}
	rows := map[string]string{}
	for line := range strings.Lines(table) {
		var row map[string]any
		decode(line, &row)
		key := map[string]any{}
		for _, k := range keyCols {
			key[k] = row[k]
		}
		rows[canon(key)] = canon(row)
	}
	if len(rows) == 0 || canon(rows) != canon(replay) {
		t.Fatalf("the table is not its changelog replayed:\ntable    %v\nchangelog %v", rows, replay)
	}
}
