package main

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
)

// TestAbuseCLINames gives the commands job and table names that are paths
// out of the data directory: each is refused with exit 2 and a message
// naming the bad name, and no file anywhere changes (a victim's completed
// checkpoints beside the data directory stay, no table is created).
func TestAbuseCLINames(t *testing.T) {
	root := t.TempDir()
	dataDir := filepath.Join(root, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// ../../victim seen from <data>/jobs/ is <root>/victim: give it three
	// completed checkpoints, which prune --keep 1 would thin to one.
	victim, err := state.OpenStorage(filepath.Join(root, "victim", "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	for id := range barrier.CheckpointID(3) {
		if _, err := victim.Complete(state.Metadata{Job: "victim", ID: id + 1, Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	before := tree(t, root)

	for _, c := range []struct {
		bad  string // named in the message
		args []string
	}{
		{"../../victim", []string{"checkpoints", "prune", "--keep", "1", "--job", "../../victim"}},
		{"../../victim", []string{"checkpoints", "list", "--job", "../../victim"}},
		{"../../victim", []string{"checkpoints", "inspect", "latest", "--job", "../../victim"}},
		{"../1", []string{"checkpoints", "inspect", "../1", "--job", "victim"}},
		{"..", []string{"checkpoints", "list", "--job", ".."}},
		{"../../x", []string{"table", "scan", "--table", "../../x"}},
		{"../../x", []string{"table", "get", "--table", "../../x", "--key", `{"a":1}`}},
		{"/tmp/abs", []string{"table", "scan", "--table", "/tmp/abs"}},
		{"../../x", []string{"table", "forget", "--table", "../../x", "--job", "j"}},
		{"../j", []string{"table", "forget", "--table", "t", "--job", "../j"}},
	} {
		out, stderr, code := runCLIErr(t, nil, append(c.args, "--data-dir", dataDir)...)
		if code != exitUsage || !strings.Contains(stderr, fmt.Sprintf("%q", c.bad)) {
			t.Errorf("runner %s: exit %d, want %d naming %q; stdout %q, stderr %q",
				strings.Join(c.args, " "), code, exitUsage, c.bad, out, stderr)
		}
	}
	if after := tree(t, root); !maps.Equal(before, after) {
		t.Fatalf("files changed:\nbefore %v\nafter  %v", before, after)
	}
}

// tree lists every file and folder under root with its size and time.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		m[rel] = fmt.Sprintf("%s %d %s", fi.Mode(), fi.Size(), fi.ModTime())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
