package build

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// deploymentFile holds, in a data directory, the deployment id: random,
// made once, never changed. Changelog transactional ids derive from it, so
// that two runners (two data directories) never share one on a cluster.
const deploymentFile = "deployment.id"

// DeploymentID returns the deployment id of a data directory, creating it
// on first use: 16 hex digits, in <data_dir>/deployment.id (mode 0644),
// written to a temporary file, synced, and linked into place, so that a
// crash or a second process never leaves a partial or a second id.
func DeploymentID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, deploymentFile)
	if id, err := readDeploymentID(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", fmt.Errorf("make data dir: %w", err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make deployment id: %w", err)
	}
	id := hex.EncodeToString(b[:])
	tmp, err := os.CreateTemp(dataDir, deploymentFile+".tmp*")
	if err != nil {
		return "", fmt.Errorf("make deployment id: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(id + "\n")
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write deployment id: %w", err)
	}
	// A link, unlike a rename, never replaces an id made meanwhile.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readDeploymentID(path)
		}
		return "", fmt.Errorf("write deployment id: %w", err)
	}
	if err := syncDir(dataDir); err != nil {
		return "", fmt.Errorf("write deployment id: %w", err)
	}
	return id, nil
}

func readDeploymentID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if _, herr := hex.DecodeString(id); herr != nil || len(id) != 16 {
		return "", fmt.Errorf("deployment id %s: %q is not 16 hex digits", path, id)
	}
	return id, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// TransactionalID is the changelog exporter's transactional id of a table
// in a data directory: the id the job file sets, else
// ebbflow-<deployment>-<job>-<table> (job: the one whose file declares the
// changelog).
func TransactionalID(deployment, job, table, explicit string) string {
	if explicit != "" {
		return explicit
	}
	return "ebbflow-" + deployment + "-" + job + "-" + table
}
