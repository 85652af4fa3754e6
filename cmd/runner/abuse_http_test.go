package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAbuseHTTP attacks a running runner's HTTP server as a page in a
// local browser can: a DNS-rebound read of table rows (Host evil.example),
// and stops posted without the token, with a wrong one, and cross-origin.
// Each is refused and the runner keeps running; `runner stop`, which reads
// the data directory's token, stops it.
func TestAbuseHTTP(t *testing.T) {
	dir := t.TempDir()
	c := start(t, nil, "run", "-f", "../../examples/visitors/job.yaml", "--data-dir", dir, "--http-address", "127.0.0.1:0",
		"--set", "checkpoint.interval=100ms", "--summary", "0")
	var addr string
	waitFor(t, c, 30*time.Second, "the runner's address", func() bool { addr = liveRunner(dir); return addr != "" })
	_, port, _ := net.SplitHostPort(addr)
	rows := "http://" + addr + `/api/v1/tables/page_visitors/rows?key={"page":"home"}`
	waitFor(t, c, 30*time.Second, "a row for home", func() bool {
		_, body := httpGet(t, rows)
		return strings.HasPrefix(body, `{"page":"home"`)
	})

	e := &endpoint{addr: addr, base: "http://" + addr, client: http.DefaultClient}
	rowsPath := strings.TrimPrefix(rows, e.base)
	if code, body := send(t, e, "GET", rowsPath, "evil.example:"+port); code != http.StatusForbidden || strings.Contains(body, "home") {
		t.Errorf("rows read with Host evil.example: %d %q, want 403 and no row", code, body)
	}
	for _, h := range [][]string{
		nil,
		{"Authorization", "Bearer not-the-token"},
		{"Origin", "http://evil.example", "Content-Type", "text/plain"},
	} {
		if code, body := send(t, e, "POST", "/api/v1/stop", addr, h...); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Fatalf("POST /api/v1/stop with %q: %d %q, want 401 or 403", h, code, body)
		}
	}
	if code, _ := send(t, e, "POST", "/api/v1/stop", "evil.example:"+port); code != http.StatusForbidden {
		t.Fatalf("POST /api/v1/stop with Host evil.example: %d, want 403", code)
	}
	if code, _ := httpGet(t, "http://"+addr+"/livez"); code != http.StatusOK || strings.Contains(c.stderr.String(), "stopping") {
		t.Fatalf("the runner stopped on a refused request (livez %d); log:\n%s", code, c.stderr.String())
	}

	fi, err := os.Stat(filepath.Join(dir, tokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", fi, err)
	}
	if out, code := runCLI(t, nil, "stop", "--data-dir", dir); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("stop: exit %d: %s", code, out)
	}
	if code := c.exitCode(t, 30*time.Second); code != 0 {
		t.Fatalf("runner exit %d after stop; log:\n%s", code, c.stderr.String())
	}
}
