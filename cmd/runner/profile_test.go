package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCPUProfile runs a bounded job with --cpu-profile: the file holds a
// profile of the run (gzipped protobuf naming the runner's functions), not
// an empty or cut one.
func TestCPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.pprof")
	c := start(t, nil, "run", "-f", "../../examples/latency/job.yaml", "--data-dir", filepath.Join(dir, "data"),
		"--http-address", "off", "--set", "source.datagen.count=200000", "--set", "source.datagen.rate=0",
		"--cpu-profile", prof)
	if code := c.exitCode(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d; log:\n%s", code, c.stderr.String())
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("profile is not gzipped: %v", err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("profile cut short: %v", err)
	}
	// The string table of a profile written by runtime/pprof names the
	// sampled functions and the profile's sample type.
	for _, want := range []string{"cpu", "nanoseconds", "github.com/ebbflow/ebbflow/"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("profile (%d bytes) does not name %q", len(data), want)
		}
	}
}
