package kafka

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Connection is how a client reaches a Kafka cluster. It is one thing for
// every client of ebbflow: the source (Config embeds it), its dead
// letters, and the changelog exporter and reader (package
// sink/aggmerge/export), so a connection is set up one way everywhere. It
// prints (String, GoString, every fmt verb) with secrets redacted.
type Connection struct {
	// Brokers are the seed brokers (host:port). Required.
	Brokers []string
	// ClientID names the client to the brokers ("ebbflow").
	ClientID string
	// TLS, when set, encrypts the connections.
	TLS *TLS
	// SASL, when set, authenticates the connections.
	SASL *SASL
	// ClientOptions are extra franz-go options applied last (fetch sizes,
	// timeouts).
	ClientOptions []kgo.Opt
}

// Options returns the franz-go options that connect as c says: seed
// brokers, client id, TLS and SASL, then c.ClientOptions.
func (c Connection) Options() ([]kgo.Opt, error) {
	if len(c.Brokers) == 0 {
		return nil, fmt.Errorf("kafka connection: no brokers")
	}
	if c.SASL != nil {
		if err := c.SASL.validate(); err != nil {
			return nil, fmt.Errorf("kafka connection: %w", err)
		}
	}
	if c.ClientID == "" {
		c.ClientID = defaultClientID
	}
	opts, err := c.connOptions()
	if err != nil {
		return nil, fmt.Errorf("kafka connection: %w", err)
	}
	return append(opts, c.ClientOptions...), nil
}

// connOptions returns the client options for TLS, SASL and the client id.
func (c *Connection) connOptions() ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ClientID(c.ClientID)}
	if c.TLS != nil {
		tc, err := c.TLS.config()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if s := c.SASL; s != nil {
		switch s.Mechanism {
		case SASLPlain:
			opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password.reveal()}.AsMechanism()))
		case SASLScramSHA256:
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password.reveal()}.AsSha256Mechanism()))
		case SASLScramSHA512:
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password.reveal()}.AsSha512Mechanism()))
		}
	}
	return opts, nil
}

// String describes c for logs, with secrets redacted.
func (c Connection) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "brokers=%v", c.Brokers)
	c.appendSecurity(&b)
	return b.String()
}

// GoString redacts like String, for %#v.
func (c Connection) GoString() string { return "kafka.Connection{" + c.String() + "}" }

// appendSecurity appends the client id, TLS and SASL (redacted) to b.
func (c *Connection) appendSecurity(b *strings.Builder) {
	if c.ClientID != "" {
		fmt.Fprintf(b, " client_id=%q", c.ClientID)
	}
	if c.TLS != nil {
		fmt.Fprintf(b, " tls=%s", c.TLS)
	}
	if c.SASL != nil {
		fmt.Fprintf(b, " sasl=%s", c.SASL)
	}
}
