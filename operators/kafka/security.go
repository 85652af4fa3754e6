package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
)

// Secret is a string that never prints: fmt (every verb), encoding and
// slog all see it redacted, so a Config can be logged whole.
type Secret string

const redacted = "[redacted]"

func (Secret) String() string               { return redacted }
func (Secret) Format(f fmt.State, _ rune)   { _, _ = f.Write([]byte(redacted)) }
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (s Secret) reveal() string             { return string(s) }

// TLS configures encrypted connections.
type TLS struct {
	// CAFile is a PEM bundle of the CAs that sign the brokers' certificates
	// (empty: the system pool).
	CAFile string
	// CertFile and KeyFile are the client's PEM certificate and key, for
	// mutual TLS (both or neither).
	CertFile, KeyFile string
	// ServerName overrides the name checked in the brokers' certificates.
	ServerName string
	// InsecureSkipVerify accepts any broker certificate: for tests only.
	InsecureSkipVerify bool
}

func (t *TLS) String() string {
	return fmt.Sprintf("{ca=%q cert=%q key=%q server_name=%q insecure_skip_verify=%v}",
		t.CAFile, t.CertFile, t.KeyFile, t.ServerName, t.InsecureSkipVerify)
}

// config loads the files into a tls.Config.
func (t *TLS) config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented for tests
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read tls ca file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca file %q: no PEM certificate", t.CAFile)
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("tls: set both CertFile and KeyFile, or neither")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load tls client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// SASL mechanisms.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SASL configures authentication.
type SASL struct {
	// Mechanism is SASLPlain, SASLScramSHA256 or SASLScramSHA512.
	Mechanism string
	Username  string
	Password  Secret
}

func (s *SASL) String() string {
	return fmt.Sprintf("{mechanism=%s username=%q password=%s}", s.Mechanism, s.Username, redacted)
}

func (s *SASL) validate() error {
	switch s.Mechanism {
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
	default:
		return fmt.Errorf("unknown sasl mechanism %q (want %s, %s or %s)", s.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
	if s.Username == "" {
		return errors.New("sasl: empty username")
	}
	return nil
}
