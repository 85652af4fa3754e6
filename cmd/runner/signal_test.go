package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSignalBeforeJobsStart sends SIGTERM as soon as the runner holds its
// data dir, while it still opens tables and builds jobs: the signal is a
// stop like any other (the jobs start, take a final checkpoint, exit 0),
// not a kill that a client which saw the lock or the server could cause.
func TestSignalBeforeJobsStart(t *testing.T) {
	for i := range 3 {
		dir := t.TempDir()
		c := start(t, nil, "run", "-f", "../../examples/latency/job.yaml", "--data-dir", dir,
			"--http-address", "127.0.0.1:0", "--set", "source.datagen.rate=100")
		lock := filepath.Join(dir, lockFile)
		for {
			if _, err := os.Stat(lock); err == nil {
				break
			}
			select {
			case <-c.done:
				t.Fatalf("runner exited before it locked %s: %v; log:\n%s", dir, c.err, c.stderr.String())
			case <-time.After(time.Millisecond):
			}
		}
		stopGracefully(t, c)
		if log := c.stderr.String(); !strings.Contains(log, "stopping: taking a final checkpoint") {
			t.Fatalf("run %d: no graceful stop in the log:\n%s", i, log)
		}
	}
}
