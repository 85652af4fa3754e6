package build

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
)

// aclJob reads "in" on a secured cluster, dead-letters what fails into %s,
// and publishes its changelog there too (no brokers: the source's cluster,
// with its SASL).
const aclJob = `
job: {name: secure}
source:
  kafka:
    brokers: [%s]
    sasl: {mechanism: PLAIN, username: app, password: app-secret}
    topics: [in]
    on_error: dead_letter
    dead_letter_topic: %s
    schema: {k: string, a: int64, b: int64}
transforms:
  - map: {r: a %% b}
sink:
  table: {name: mods, primary_key: [k], buckets: 2, columns: {sum: {agg: sum, from: r}}, changelog: {topic: out}}
checkpoint: {interval: 50ms}
restart: {max_attempts: 0}
`

// TestACLsOfTheDocs runs a job as a user that has exactly the ACLs
// docs/KAFKA.md lists (source topic, group, dead-letter topic, changelog
// topic and its versions topic, the "ebbflow-" transactional-id prefix) on a kfake cluster that
// enforces them: the dead-letter and changelog topics are created, both
// kinds of dead letters and the changelog arrive. A dead-letter topic the
// user may not create fails the job at its start, with no restart.
func TestACLsOfTheDocs(t *testing.T) {
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	topic, group, txn := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup, kmsg.ACLResourceTypeTransactionalId
	acl := func(rt kmsg.ACLResourceType, name string, p kmsg.ACLResourcePatternType, ops ...kmsg.ACLOperation) []kfake.ACL {
		var out []kfake.ACL
		for _, op := range ops {
			out = append(out, kfake.ACL{Resource: rt, Name: name, Pattern: p, Operation: op, Allow: true})
		}
		return out
	}
	R, W, C, D := kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationCreate, kmsg.ACLOperationDescribe
	var acls []kfake.ACL
	for _, a := range [][]kfake.ACL{
		acl(topic, "in", lit, R, D),
		acl(group, "secure", lit, R),
		acl(topic, "dead", lit, C, W, D),
		acl(topic, "out", lit, C, W, D, R),
		acl(topic, "out.versions", lit, C, W, D, R),
		acl(txn, "ebbflow-", pre, W, D),
	} {
		acls = append(acls, a...)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-secret"), kfake.User("PLAIN", "app", "app-secret", acls...),
		kfake.SeedTopics(1, "in", "forbidden-source"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.SASL(plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	recs := []*kgo.Record{
		{Topic: "in", Value: []byte(`{"k":"x","a":7,"b":2}`)},
		{Topic: "in", Value: []byte(`{"k":"x","a":7,"b":0}`)}, // fails its expression
		{Topic: "in", Value: []byte(`not json`)},              // undecodable
		{Topic: "in", Value: []byte(`{"k":"y","a":9,"b":4}`)},
	}
	if err := admin.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	p := load(t, fmt.Sprintf(aclJob, strings.Join(brokers, ","), "dead"))
	e := openEnv(t, Options{DataDir: t.TempDir()}, p)
	defer e.Close()
	xctx, cancel := context.WithCancel(ctx)
	exported := make(chan error, 1)
	go func() { exported <- e.RunExporters(xctx) }()
	j, done := startJob(t, xctx, e, p)
	admin.AddConsumeTopics("out", "dead")
	got := map[string]int{}
	pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
	defer pcancel()
	for (got["out"] < 2 || got["dead"] < 2) && pctx.Err() == nil {
		fs := admin.PollFetches(pctx)
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Topic]++
			if r.Topic == "dead" && len(r.Headers) < 4 {
				t.Errorf("dead letter %s without origin headers: %v", r.Value, r.Headers)
			}
		})
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-exported; err != nil {
		t.Fatal(err)
	}
	if got["out"] < 2 || got["dead"] != 2 {
		t.Fatalf("records per topic %v, want 2 changelog records (x, y) and 2 dead letters", got)
	}

	// No CREATE on the dead-letter topic: the start fails, naming it.
	p = load(t, fmt.Sprintf(aclJob, strings.Join(brokers, ","), "forbidden-dead"))
	e2 := NewEnv(Options{DataDir: t.TempDir(), Logger: testLogger()})
	defer e2.Close()
	if err := e2.OpenTables([]*pipelines.Pipeline{p}); err != nil {
		t.Fatal(err)
	}
	j, err = e2.Build(p, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	err = j.Run(ctx)
	if !errors.Is(err, kafka.ErrTopicNotAllowed) || !errors.Is(err, runtime.ErrPermanent) || !strings.Contains(err.Error(), `"forbidden-dead"`) {
		t.Fatalf("run: %v, want ErrTopicNotAllowed naming the topic", err)
	}
}
