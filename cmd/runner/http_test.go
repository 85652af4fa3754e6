package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/internal/syncbuf"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
)

// testRunner is a runner without jobs on a fresh data directory, whose log
// goes to the returned buffer.
func testRunner(t *testing.T) (*runner, *syncbuf.Buffer) {
	t.Helper()
	dir := t.TempDir()
	log := &syncbuf.Buffer{}
	r := &runner{log: slog.New(slog.NewTextHandler(log, nil)), reg: prometheus.NewRegistry(), dataDir: dir, stopReq: make(chan struct{})}
	r.mu.done = map[string]error{}
	r.env = build.NewEnv(build.Options{DataDir: dir, Registerer: r.reg, Logger: r.log})
	t.Cleanup(func() { _ = r.env.Close() })
	return r, log
}

// serveTest starts r's server on addr and returns how the CLI reaches it.
func serveTest(t *testing.T, r *runner, addr string, cfg pipelines.HTTP) *endpoint {
	t.Helper()
	s, err := r.serve(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.shutdown)
	e, err := findRunner(r.dataDir, "")
	if err != nil || e == nil {
		t.Fatalf("the CLI does not find the runner: %v", err)
	}
	return e
}

// send makes a request to the runner at e with the given Host and headers
// (Authorization included: e's token is not added) and returns the status
// and the body.
func send(t *testing.T, e *endpoint, method, path, host string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func stopRequested(r *runner) bool {
	select {
	case <-r.stopReq:
		return true
	default:
		return false
	}
}

// TestHTTPHost: a request naming a host that is not the server's (DNS
// rebinding: a page of evil.example whose name now resolves to 127.0.0.1)
// is refused, on every endpoint; IP addresses, localhost, the host of the
// address and http.allowed_hosts are accepted.
func TestHTTPHost(t *testing.T) {
	r, _ := testRunner(t)
	e := serveTest(t, r, "127.0.0.1:0", pipelines.HTTP{AllowedHosts: []string{"Runner.Internal"}})
	_, port, _ := strings.Cut(e.addr, ":")
	for _, path := range []string{"/livez", "/metrics", "/readyz", "/api/v1/jobs", "/api/v1/tables", "/api/v1/tables/t/rows", "/api/v1/kafka", "/api/v1/topology"} {
		for _, host := range []string{"evil.example", "evil.example:" + port, "localhost.evil.example", "127.0.0.1.evil.example", "runner.internal.evil.example"} {
			if code, _ := send(t, e, "GET", path, host); code != http.StatusForbidden {
				t.Errorf("GET %s with Host %s: %d, want 403", path, host, code)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "10.1.2.3", "runner.internal:" + port, "runner.internal."} {
		if code, _ := send(t, e, "GET", "/api/v1/jobs", host); code != http.StatusOK {
			t.Errorf("GET /api/v1/jobs with Host %s: %d, want 200", host, code)
		}
	}
	if code, _ := send(t, e, "POST", "/api/v1/stop", "evil.example", "Authorization", "Bearer "+e.token); code != http.StatusForbidden || stopRequested(r) {
		t.Fatalf("POST /api/v1/stop with the token and Host evil.example: %d, want 403 and no stop", code)
	}
}

// TestHTTPStop: POST /api/v1/stop without the token, with a wrong one, or
// from another origin's page (even with the token) is refused and stops
// nothing; with the token it stops.
func TestHTTPStop(t *testing.T) {
	r, _ := testRunner(t)
	e := serveTest(t, r, "127.0.0.1:0", pipelines.HTTP{})
	if len(e.token) < 20 {
		t.Fatalf("token %q", e.token)
	}
	for _, c := range []struct {
		headers []string
		want    int
	}{
		{nil, http.StatusUnauthorized},
		{[]string{"Authorization", "Bearer " + e.token[1:]}, http.StatusUnauthorized},
		{[]string{"Authorization", "Bearer " + e.token + "x"}, http.StatusUnauthorized},
		{[]string{"Authorization", e.token}, http.StatusUnauthorized},
		{[]string{"Authorization", "Basic " + e.token}, http.StatusUnauthorized},
		// a form a page of evil.example posts to http://127.0.0.1:port
		{[]string{"Origin", "http://evil.example", "Content-Type", "text/plain"}, http.StatusForbidden},
		{[]string{"Origin", "http://evil.example", "Authorization", "Bearer " + e.token}, http.StatusForbidden},
		{[]string{"Origin", "null", "Authorization", "Bearer " + e.token}, http.StatusForbidden},
		{[]string{"Sec-Fetch-Site", "cross-site", "Authorization", "Bearer " + e.token}, http.StatusForbidden},
		{[]string{"Sec-Fetch-Site", "same-site", "Origin", "http://localhost:1", "Authorization", "Bearer " + e.token}, http.StatusForbidden},
	} {
		if code, _ := send(t, e, "POST", "/api/v1/stop", "", c.headers...); code != c.want || stopRequested(r) {
			t.Fatalf("POST /api/v1/stop with %q: %d (stop requested: %v), want %d and no stop", c.headers, code, stopRequested(r), c.want)
		}
	}
	if code, _ := send(t, e, "POST", "/api/v1/stop", "", "Authorization", "Bearer "+e.token, "Origin", "http://"+e.addr); code != http.StatusAccepted || !stopRequested(r) {
		t.Fatalf("POST /api/v1/stop with the token: %d (stop requested: %v), want 202 and a stop", code, stopRequested(r))
	}
}

// TestHTTPCrossOriginRead: a page of another origin cannot read the API
// (table rows), even on an allowed Host; /metrics, /livez and /readyz are
// not refused.
func TestHTTPCrossOriginRead(t *testing.T) {
	r, _ := testRunner(t)
	e := serveTest(t, r, "127.0.0.1:0", pipelines.HTTP{})
	for _, h := range [][]string{{"Origin", "http://evil.example"}, {"Sec-Fetch-Site", "cross-site"}, {"Origin", "http://localhost:1"}} {
		for _, path := range []string{"/api/v1/tables/t/rows", "/api/v1/tables", "/api/v1/jobs"} {
			if code, _ := send(t, e, "GET", path, "", h...); code != http.StatusForbidden {
				t.Errorf("GET %s with %q: %d, want 403", path, h, code)
			}
		}
	}
	if code, _ := send(t, e, "GET", "/api/v1/tables/t/rows", "", "Origin", "http://"+e.addr, "Sec-Fetch-Site", "same-origin"); code != http.StatusNotFound {
		t.Errorf("GET the rows of an unknown table from the same origin: %d, want 404", code)
	}
	if code, _ := send(t, e, "GET", "/metrics", "", "Sec-Fetch-Site", "cross-site"); code != http.StatusOK {
		t.Errorf("GET /metrics from another site: %d, want 200", code)
	}
}

// TestHTTPToken: the token file is made once, mode 0600, and kept across
// restarts; one open to other users stops the server from starting.
func TestHTTPToken(t *testing.T) {
	r, _ := testRunner(t)
	s, err := r.serve("127.0.0.1:0", pipelines.HTTP{})
	if err != nil {
		t.Fatal(err)
	}
	s.shutdown()
	path := filepath.Join(r.dataDir, tokenFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %v %v, want mode 0600", fi, err)
	}
	first, _ := os.ReadFile(path)
	e := serveTest(t, r, "127.0.0.1:0", pipelines.HTTP{})
	if again, _ := os.ReadFile(path); string(again) != string(first) || e.token != strings.TrimSpace(string(first)) {
		t.Fatalf("the token changed across restarts: %q, then %q (CLI: %q)", first, again, e.token)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.serve("127.0.0.1:0", pipelines.HTTP{}); err == nil || !strings.Contains(err.Error(), "open to other users") {
		t.Fatalf("serve with a token file of mode 0644: %v, want a refusal", err)
	}
}

// TestHTTPNonLoopback: listening beyond loopback is warned of, and the API
// then needs the token for reads too; /metrics, /livez and /readyz do not.
func TestHTTPNonLoopback(t *testing.T) {
	r, log := testRunner(t)
	e := serveTest(t, r, "0.0.0.0:0", pipelines.HTTP{})
	if !strings.Contains(log.String(), "level=WARN msg=\"http listening on a non-loopback address without TLS") {
		t.Errorf("no warning of a non-loopback address:\n%s", log.String())
	}
	for _, path := range []string{"/api/v1/tables", "/api/v1/topology"} {
		if code, _ := send(t, e, "GET", path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, code)
		}
		if code, _ := send(t, e, "GET", path, "", "Authorization", "Bearer "+e.token); code != http.StatusOK {
			t.Errorf("GET %s with the token: %d, want 200", path, code)
		}
	}
	if code, _ := send(t, e, "GET", "/metrics", ""); code != http.StatusOK {
		t.Errorf("GET /metrics: %d, want 200", code)
	}
	r2, log2 := testRunner(t)
	serveTest(t, r2, "127.0.0.1:0", pipelines.HTTP{})
	if strings.Contains(log2.String(), "WARN") {
		t.Errorf("a warning on loopback:\n%s", log2.String())
	}
}

// TestHTTPTLS: with http.tls the server speaks HTTPS only; the CLI reaches
// it through runner.json, accepting exactly its certificate.
func TestHTTPTLS(t *testing.T) {
	r, _ := testRunner(t)
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	e := serveTest(t, r, "127.0.0.1:0", pipelines.HTTP{TLS: &pipelines.HTTPTLS{CertFile: certFile, KeyFile: keyFile}})
	if !strings.HasPrefix(e.base, "https://") {
		t.Fatalf("the CLI reaches the runner at %s, want https", e.base)
	}
	var jobs []jobStatus
	if err := e.getJSON("/api/v1/jobs", &jobs); err != nil {
		t.Fatalf("the CLI over HTTPS: %v", err)
	}
	// A client trusting the certificate, naming the host in it.
	c := http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "runner.test"}}}
	resp, err := c.Get(e.base + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Body.Close(); resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("GET /livez over HTTPS: %s", resp.Status)
	}
	// Plain HTTP gets no answer from the API.
	resp, err = http.Get("http://" + e.addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Body.Close(); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("GET /livez over plain HTTP: %s, want 400", resp.Status)
	}
	// The CLI refuses another certificate than the recorded one.
	b, _ := os.ReadFile(filepath.Join(r.dataDir, runnerFile))
	var info runnerInfo
	if err := json.Unmarshal(b, &info); err != nil || len(info.TLSCertSHA256) != 64 {
		t.Fatalf("%s: %s (%v)", runnerFile, b, err)
	}
	info.TLSCertSHA256 = strings.Repeat("0", 64)
	b, _ = json.Marshal(info)
	if err := os.WriteFile(filepath.Join(r.dataDir, runnerFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if e, err := findRunner(r.dataDir, ""); e != nil || err != nil {
		t.Fatalf("the CLI accepted a certificate other than the recorded one: %v %v", e, err)
	}
	r2, _ := testRunner(t)
	if _, err := r2.serve("127.0.0.1:0", pipelines.HTTP{TLS: &pipelines.HTTPTLS{CertFile: keyFile, KeyFile: certFile}}); codeOf(err) != exitUsage {
		t.Fatalf("serve with the files swapped: %v (exit %d), want exit %d", err, codeOf(err), exitUsage)
	}
}

// selfSigned writes a self-signed certificate for runner.test and
// 127.0.0.1 and its key into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runner.test"}, DNSNames: []string{"runner.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestHTTPSRunner runs a runner with http.tls: the CLI reads a table
// through it and stops it over HTTPS, accepting the self-signed
// certificate the runner recorded.
func TestHTTPSRunner(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, t.TempDir())
	c := start(t, nil, "run", "-f", "../../examples/visitors/job.yaml", "--data-dir", dir, "--http-address", "127.0.0.1:0",
		"--set", "checkpoint.interval=100ms", "--summary", "0",
		"--set", "http.tls.cert_file="+certFile, "--set", "http.tls.key_file="+keyFile)
	var e *endpoint
	waitFor(t, c, 30*time.Second, "the runner over HTTPS", func() bool {
		var err error
		e, err = findRunner(dir, "")
		return err == nil && e != nil
	})
	if !strings.HasPrefix(e.base, "https://") || !strings.Contains(c.stderr.String(), "tls=true") {
		t.Fatalf("runner at %s; log:\n%s", e.base, c.stderr.String())
	}
	waitFor(t, c, 30*time.Second, "a row for home", func() bool {
		out, code := runCLI(t, nil, "table", "get", "--data-dir", dir, "--table", "page_visitors", "--key", `{"page":"home"}`, "-o", "json")
		return code == 0 && strings.HasPrefix(out, `{"page":"home"`)
	})
	if out, code := runCLI(t, nil, "stop", "--data-dir", dir); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("stop over HTTPS: exit %d: %s", code, out)
	}
	if code := c.exitCode(t, 30*time.Second); code != 0 {
		t.Fatalf("runner exit %d after stop; log:\n%s", code, c.stderr.String())
	}
}
