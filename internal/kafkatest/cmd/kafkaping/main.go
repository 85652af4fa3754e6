// Command kafkaping waits until a Kafka cluster answers a metadata request
// with at least one broker, for scripts that start a broker (.ci/kafka.sh).
// It exits 0 once the cluster answers and 1 if it does not within -timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	timeout := flag.Duration("timeout", 5*time.Second, "how long to wait for an answer")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := ping(ctx, strings.Split(*brokers, ",")); err != nil {
		fmt.Fprintf(os.Stderr, "kafkaping: %v\n", err)
		os.Exit(1)
	}
}

// ping asks for the cluster's metadata until it lists a broker or ctx ends.
func ping(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		m, err := adm.BrokerMetadata(ctx)
		if err == nil && len(m.Brokers) > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("metadata lists no broker")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", strings.Join(brokers, ","), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
