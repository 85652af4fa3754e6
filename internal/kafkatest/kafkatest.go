package kafkatest

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
)

// EnvBrokers names the environment variable holding the comma-separated
// seed brokers of a real Kafka cluster.
const EnvBrokers = "EBBFLOW_KAFKA_BROKERS"

// Timeout bounds each helper's wait on the broker.
const Timeout = 60 * time.Second

const needsReal = "needs a real Kafka broker: set " + EnvBrokers + " (CI starts one with .ci/kafka.sh)"

// RealBrokers returns the brokers named by EnvBrokers, or nil when it is unset
// or empty.
func RealBrokers() []string {
	var brokers []string
	for _, b := range strings.Split(os.Getenv(EnvBrokers), ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	return brokers
}

// Brokers returns the real brokers when EnvBrokers is set, and otherwise
// starts an embedded broker that is closed when the test ends.
func Brokers(t testing.TB) []string {
	t.Helper()
	if brokers := RealBrokers(); len(brokers) > 0 {
		return brokers
	}
	b, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

// RequireReal skips the test unless EnvBrokers names a real broker, and
// returns those brokers.
func RequireReal(t testing.TB) []string {
	t.Helper()
	brokers := RealBrokers()
	if len(brokers) == 0 {
		t.Skip(needsReal)
	}
	return brokers
}

// Client returns a franz-go client for brokers with opts, closed when the
// test ends.
func Client(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client for brokers, closed when the test ends.
func Admin(t testing.TB, brokers []string) *kadm.Client {
	t.Helper()
	return kadm.NewClient(Client(t, brokers))
}

// timeoutContext returns a context bounded by Timeout and cancelled when the test
// ends.
func timeoutContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// FreePort returns a loopback TCP port that was free a moment ago, for a
// broker or server a test starts on a port of its choice.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
