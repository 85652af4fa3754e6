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
	cfg := kafka.Config{Topics: []string{"t"}, Connection: kafka.Connection{Brokers: []string{"b:9092"},
		SASL: &kafka.SASL{Mechanism: kafka.SASLScramSHA512, Username: "alice", Password: password},
		TLS:  &kafka.TLS{ServerName: "broker"}}}
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		fmt.Fprintf(&out, verb+"\n", cfg)
		fmt.Fprintf(&out, verb+"\n", cfg.Connection)
		fmt.Fprintf(&out, verb+"\n", struct{ Kafka kafka.Connection }{cfg.Connection}) // as in export.Config
		fmt.Fprintf(&out, verb+"\n", *cfg.SASL)
		fmt.Fprintf(&out, verb+"\n", cfg.SASL.Password)
	}
	slog.New(slog.NewJSONHandler(&out, nil)).Info("cfg", "cfg", cfg, "sasl", cfg.SASL, "password", cfg.SASL.Password)
	slog.New(slog.NewTextHandler(&out, nil)).Info("cfg", "cfg", cfg, "sasl", *cfg.SASL, "conn", cfg.Connection)
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

// TestTLSAndSASL reads through a mutual-TLS listener with each SASL
// mechanism, and refuses to start with a wrong password (without printing
// it), without a client certificate, or with a CA that did not sign the
// broker's.
func TestTLSAndSASL(t *testing.T) {
	certs := testCerts(t)
	caFile, serverTLS, pool := certs.caFile, certs.server, certs.pool
	clientTLS := func() *kafka.TLS { return &kafka.TLS{CAFile: caFile, CertFile: certs.certFile, KeyFile: certs.keyFile} }
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
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DialTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{certs.client}}),
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
			cfg := kafka.Config{Topics: []string{"secure"}, Connection: kafka.Connection{Brokers: brokers, TLS: clientTLS(),
				SASL: &kafka.SASL{Mechanism: m.mech, Username: m.user, Password: password}}}
			dir := t.TempDir()
			checkSeqs(t, runUntilCommitted(t, eventJob(t, dir, newSource(t, cfg, eventFormat), 1, 0), filepath.Join(dir, "out"), 100), 100)
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		var logs bytes.Buffer
		cfg := kafka.Config{Topics: []string{"secure"}, StartTimeout: time.Second, Connection: kafka.Connection{Brokers: brokers, TLS: clientTLS(),
			SASL: &kafka.SASL{Mechanism: kafka.SASLScramSHA256, Username: "scram256-user", Password: "wrong-" + password}}}
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
	for name, tc := range map[string]*kafka.TLS{
		"unknown CA":            {CertFile: certs.certFile, KeyFile: certs.keyFile},
		"no client certificate": {CAFile: caFile},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := kafka.Config{Topics: []string{"secure"}, StartTimeout: time.Second, Connection: kafka.Connection{Brokers: brokers, TLS: tc,
				SASL: &kafka.SASL{Mechanism: kafka.SASLPlain, Username: "plain-user", Password: password}}}
			if err := eventJob(t, t.TempDir(), newSource(t, cfg, eventFormat), 1, 0).Run(t.Context()); err == nil {
				t.Fatal("connected")
			}
		})
	}
}

type certs struct {
	caFile, certFile, keyFile string
	server                    *tls.Config
	client                    tls.Certificate
	pool                      *x509.CertPool
}

// testCerts makes a CA, and a server certificate for 127.0.0.1 and a client
// certificate signed by it; the server requires a client certificate.
func testCerts(t *testing.T) certs {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: fmt.Sprint("leaf ", serial)},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	serverDER, serverKey := leaf(2, x509.ExtKeyUsageServerAuth)
	clientDER, clientKey := leaf(3, x509.ExtKeyUsageClientAuth)
	clientKeyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	c := certs{
		caFile:   write("ca.pem", "CERTIFICATE", caDER),
		certFile: write("client.pem", "CERTIFICATE", clientDER),
		keyFile:  write("client-key.pem", "EC PRIVATE KEY", clientKeyDER),
		client:   tls.Certificate{Certificate: [][]byte{clientDER}, PrivateKey: clientKey},
		pool:     x509.NewCertPool(),
	}
	c.pool.AddCert(ca)
	c.server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serverDER}, PrivateKey: serverKey}},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: c.pool, MinVersion: tls.VersionTLS12}
	return c
}
