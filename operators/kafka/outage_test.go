package kafka_test

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
	"github.com/ebbflow/ebbflow/runtime"
)

// TestBrokerOutage stops the broker under a running job and starts it
// again: the job neither fails nor loses its position, the source reports
// itself unhealthy meanwhile and counts the failed fetches.
func TestBrokerOutage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	opts := embedded.Options{Port: port, DataDir: t.TempDir()}
	b, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	brokers := b.Addrs()
	const topic = "outage"
	kafkatest.CreateTopic(t, brokers, topic, 2)
	produceEvents(t, brokers, topic, 2, 0, 500)

	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	reg := prometheus.NewRegistry()
	src := newSource(t, kafka.Config{Connection: kafka.Connection{Brokers: brokers}, Topics: []string{topic}}, eventFormat)
	j := eventJob(t, dir, src, 1, 0, func(o *runtime.Options) { o.Registerer = reg })
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	outage := func() {
		waitFor("the first 500 records", func() bool {
			got, err := operators.ReadCommitted(out, eventCodec)
			return err == nil && len(got) >= 500
		})
		b.Close()
		waitFor("the source to report the outage", func() bool { ok, _ := src.Healthy(); return !ok })
		_, msg := src.Healthy()
		t.Logf("unhealthy: %s", msg)
		time.Sleep(time.Second) // the job must ride this out
		if n := counter(t, reg, "ebbflow_source_fetch_errors_total", "operator", "kafka"); n < 1 {
			t.Errorf("fetch errors counted: %v", n)
		}
		if b, err = embedded.Start(opts); err != nil {
			t.Fatalf("restart broker: %v", err)
		}
		produceEvents(t, brokers, topic, 2, 500, 1000)
		waitFor("the source to recover", func() bool { ok, _ := src.Healthy(); return ok })
	}
	checkSeqs(t, runUntilCommitted(t, j, out, 1000, outage), 1000)
}
