package main

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// endpoint is how a command reaches the HTTP server of a runner.
type endpoint struct {
	addr   string // host:port, for messages
	base   string // scheme://host:port
	client *http.Client
	token  string // the data directory's HTTP token, "" when it has none
}

// findRunner returns how to reach the runner at address or, when address
// is empty, the runner recorded in dataDir's runner.json when it answers
// (else nil). The recorded runner is reached as it recorded: over HTTPS it
// must present exactly the certificate it recorded. address is host:port
// (HTTP), or http://host:port or https://host:port (the certificate
// verified against the system's CAs). Requests carry dataDir's HTTP token.
func findRunner(dataDir, address string) (*endpoint, error) {
	var info runnerInfo
	b, err := os.ReadFile(filepath.Join(dataDir, runnerFile))
	recorded := err == nil && json.Unmarshal(b, &info) == nil && info.HTTP != ""
	e := &endpoint{client: &http.Client{}}
	switch {
	case address == "" && !recorded:
		return nil, nil
	case address == "" || address == info.HTTP:
		e.addr, e.base = info.HTTP, "http://"+info.HTTP
		if info.TLSCertSHA256 != "" {
			e.base = "https://" + info.HTTP
			e.client.Transport = pinnedTransport(info.TLSCertSHA256)
		}
	default:
		raw := address
		if !strings.Contains(raw, "://") {
			raw = "http://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
			return nil, usageErr("--address %q: want host:port, http://host:port or https://host:port", address)
		}
		e.addr, e.base = u.Host, u.Scheme+"://"+u.Host
	}
	if address == "" && !e.live() {
		return nil, nil
	}
	if e.token, err = readToken(filepath.Join(dataDir, tokenFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return e, nil
}

// pinnedTransport accepts the one certificate whose SHA-256 is pin.
func pinnedTransport(pin string) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12,
		// Not the names or CAs: VerifyConnection checks the certificate
		// is the one the runner recorded.
		InsecureSkipVerify: true, //nolint:gosec // pinned below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				if sum := sha256.Sum256(cs.PeerCertificates[0].Raw); hex.EncodeToString(sum[:]) == pin {
					return nil
				}
			}
			return fmt.Errorf("the server's certificate is not the one recorded in %s", runnerFile)
		}}
	return t
}

// live reports whether the runner answers /livez.
func (e *endpoint) live() bool {
	c := *e.client
	c.Timeout = 2 * time.Second
	resp, err := c.Get(e.base + "/livez")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// do sends a request with the token.
func (e *endpoint) do(method, path string) (*http.Response, error) {
	req, err := http.NewRequest(method, e.base+path, nil)
	if err != nil {
		return nil, err
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	return e.client.Do(req)
}

func (e *endpoint) getJSON(path string, v any) error {
	resp, err := e.do(http.MethodGet, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return e.refused("GET "+path, resp)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// refused describes an answer other than the one wanted: its status and
// what the server said.
func (e *endpoint) refused(what string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return fmt.Errorf("%s at %s: %s: %s", what, e.addr, resp.Status, strings.TrimSpace(string(b)))
}
