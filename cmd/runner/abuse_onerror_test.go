package main

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
)

// TestAbuseOnErrorFail feeds a job with on_error: fail (the default) and
// restarts allowed one bad record: one its format cannot decode, or one
// whose expressions fail (no status for `status == "PAID"`). A restart
// would meet the same record again, so the runner must exit 1 at once,
// naming the record, without a single restart.
func TestAbuseOnErrorFail(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, tc := range []struct{ name, bad, reason string }{
		{"undecodable", `{"seq": 1, "user": "u1"`, "undecodable record"},
		{"expression", `{"seq": 1, "user": "u1", "region": "eu", "amount": 5}`, "status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := kafkatest.NewTopic(t, brokers, 1)
			kafkatest.Produce(t, brokers,
				&kgo.Record{Topic: topic, Value: []byte(`{"seq": 0, "user": "u0", "region": "eu", "amount": 5, "status": "PAID"}`)},
				&kgo.Record{Topic: topic, Value: []byte(tc.bad)})
			c := start(t, nil, "run", "-f", "testdata/orders.yaml", "--data-dir", t.TempDir(), "--http-address", "off", "--summary", "0",
				"--set", "source.kafka.brokers=["+strings.Join(brokers, ",")+"]", "--set", "source.kafka.topics=["+topic+"]",
				"--set", "source.kafka.on_error=fail", "--set", "restart={max_attempts: 5, initial_backoff: 10ms}")
			code := c.exitCode(t, 60*time.Second)
			log := c.stderr.String()
			if code != exitFailure {
				t.Fatalf("exit %d, want %d; log:\n%s", code, exitFailure, log)
			}
			if strings.Contains(log, "restarting") {
				t.Fatalf("the job restarted after a bad record under on_error: fail; log:\n%s", log)
			}
			if !strings.Contains(log, tc.reason) {
				t.Fatalf("the log does not name the bad record (%q); log:\n%s", tc.reason, log)
			}
		})
	}
}
