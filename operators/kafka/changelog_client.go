package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ConnectionOptions returns the franz-go options that connect as cfg says:
// seed brokers, client id, TLS and SASL, then cfg.ClientOptions. Only those
// fields are read, so the changelog exporter and reader (package
// sink/aggmerge/export) configure their connections with the same Config
// as the source, and a connection is set up one way everywhere.
func (cfg Config) ConnectionOptions() ([]kgo.Opt, error) {
	if len(cfg.Brokers) == 0 {
		return nil, fmt.Errorf("kafka connection: no brokers")
	}
	if cfg.SASL != nil {
		if err := cfg.SASL.validate(); err != nil {
			return nil, fmt.Errorf("kafka connection: %w", err)
		}
	}
	if cfg.ClientID == "" {
		cfg.ClientID = defaultClientID
	}
	opts, err := cfg.connOptions()
	if err != nil {
		return nil, fmt.Errorf("kafka connection: %w", err)
	}
	return append(opts, cfg.ClientOptions...), nil
}
