package kafka_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

const password = "s3cr3t-p4ss"

func TestSecretsNeverPrint(t *testing.T) {
	cfg := kafka.Config{Brokers: []string{"b:9092"}, Topics: []string{"t"},
		SASL: &kafka.SASL{Mechanism: kafka.SASLScramSHA512, Username: "alice", Password: password},
		TLS:  &kafka.TLS{ServerName: "broker"}}
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		fmt.Fprintf(&out, verb+"\n", cfg)
		fmt.Fprintf(&out, verb+"\n", *cfg.SASL)
		fmt.Fprintf(&out, verb+"\n", cfg.SASL.Password)
	}
	slog.New(slog.NewJSONHandler(&out, nil)).Info("cfg", "cfg", cfg, "sasl", cfg.SASL, "password", cfg.SASL.Password)
	slog.New(slog.NewTextHandler(&out, nil)).Info("cfg", "cfg", cfg, "sasl", *cfg.SASL)
	j, err := json.Marshal(cfg.SASL)
	if err != nil {
		t.Fatal(err)
	}
	out.Write(j)
	src := newSource(t, cfg, kafka.Raw())
	out.WriteString(src.String())
	if strings.Contains(out.String(), password) {
		t.Fatalf("password printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "alice") || !strings.Contains(out.String(), "[redacted]") {
		t.Fatalf("want the user and a redaction mark in:\n%s", out.String())
	}
}

// TestTLSAndSASL reads through a TLS listener with each SASL mechanism,
// and refuses to start with a wrong password (without printing it).
func TestTLSAndSASL(t *testing.T) {
	caFile, serverTLS, pool := testCerts(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.TLS(serverTLS),
		kfake.Superuser("PLAIN", "plain-user", password),
		kfake.Superuser("SCRAM-SHA-256", "scram256-user", password),
		kfake.Superuser("SCRAM-SHA-512", "scram512-user", password),
		kfake.SeedTopics(2, "secure"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DialTLSConfig(&tls.Config{RootCAs: pool}),
		kgo.SASL(scram.Auth{User: "scram512-user", Pass: password}.AsSha512Mechanism()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(t.Context(), eventRecords("secure", 2, 0, 100, testKeys)...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	for _, m := range []struct{ mech, user string }{
		{kafka.SASLPlain, "plain-user"}, {kafka.SASLScramSHA256, "scram256-user"}, {kafka.SASLScramSHA512, "scram512-user"},
	} {
		t.Run(m.mech, func(t *testing.T) {
			cfg := kafka.Config{Brokers: brokers, Topics: []string{"secure"}, TLS: &kafka.TLS{CAFile: caFile},
				SASL: &kafka.SASL{Mechanism: m.mech, Username: m.user, Password: password}}
			dir := t.TempDir()
			checkSeqs(t, runUntilCommitted(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 1, 0), filepath.Join(dir, "out"), 100), 100)
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		var logs bytes.Buffer
		cfg := kafka.Config{Brokers: brokers, Topics: []string{"secure"}, TLS: &kafka.TLS{CAFile: caFile}, StartTimeout: time.Second,
			SASL: &kafka.SASL{Mechanism: kafka.SASLScramSHA256, Username: "scram256-user", Password: "wrong-" + password}}
		j := eventJob(t, t.TempDir(), newSource(t, cfg, eventFormat), 1, 0, func(o *runtime.Options) {
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		err := j.Run(t.Context())
		if err == nil || !strings.Contains(err.Error(), "resolve start offsets") {
			t.Fatalf("run: %v, want a start failure", err)
		}
		if all := err.Error() + logs.String(); strings.Contains(all, password) {
			t.Fatalf("password printed:\n%s", all)
		}
	})
	t.Run("unknown CA", func(t *testing.T) {
		cfg := kafka.Config{Brokers: brokers, Topics: []string{"secure"}, TLS: &kafka.TLS{}, StartTimeout: time.Second,
			SASL: &kafka.SASL{Mechanism: kafka.SASLPlain, Username: "plain-user", Password: password}}
		if err := eventJob(t, t.TempDir(), newSource(t, cfg, eventFormat), 1, 0).Run(t.Context()); err == nil {
			t.Fatal("connected to a broker whose certificate no trusted CA signed")
		}
	})
}

// testCerts makes a CA and a certificate for 127.0.0.1 signed by it, and
// returns the CA's PEM file, the server's TLS config and the CA pool.
func testCerts(t *testing.T) (string, *tls.Config, *x509.CertPool) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, leafKey := key(), key()
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return caFile, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}, MinVersion: tls.VersionTLS12}, pool
}
