package build

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
)

// clusterJob reads a Kafka topic on a cluster of its own and publishes
// its table's changelog without naming brokers.
const clusterJob = `
job: {name: clusters}
source:
  kafka: {brokers: [%s], topics: [%s], schema: {k: string, v: int64}}
sink:
  table: {name: sums, primary_key: [k], buckets: 2, columns: {v: {agg: sum}}, changelog: {topic: %s}}
checkpoint: {interval: 50ms}
`

// TestChangelogOnSourceCluster runs a job whose source is on a cluster
// other than the runner's embedded broker (a separate kfake, or the real
// Kafka): its changelog, given no brokers, is published on the source's
// cluster, and the embedded broker is never started.
func TestChangelogOnSourceCluster(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopic(t, brokers, 1)
	out := in + "-changelog"
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: in, Value: fmt.Appendf(nil, `{"k":"k%d","v":%d}`, i%3, i)})
	}
	kafkatest.Produce(t, brokers, recs...)
	p := load(t, fmt.Sprintf(clusterJob, strings.Join(brokers, ","), in, out))
	if got := p.Changelogs(); len(got) != 1 || got[0].Cluster != strings.Join(brokers, ",") {
		t.Fatalf("changelogs %+v, want on %v", got, brokers)
	}
	e := openEnv(t, Options{DataDir: t.TempDir()}, p)
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	exported := make(chan error, 1)
	go func() { exported <- e.RunExporters(ctx) }()
	j, done := startJob(t, ctx, e, p)
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(out), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	keys := map[string]bool{}
	pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
	defer pcancel()
	for len(keys) < 3 && pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { keys[string(r.Key)] = true })
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-exported; err != nil {
		t.Fatal(err)
	}
	if len(keys) < 3 {
		t.Fatalf("the changelog on the source's cluster has keys %v, want k0, k1, k2", keys)
	}
	if b := e.EmbeddedBrokers(); b != nil {
		t.Fatalf("the embedded broker was started at %v", b)
	}
}
