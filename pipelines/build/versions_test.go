package build

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// chainJobs: A totals orders per user (a user's region is fixed), B reads
// A's changelog and totals the users per region.
const chainJobs = `
job: {name: users}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[2]s]
    format: json
    schema: {user: string, region: string, amount: int64}
sink:
  table:
    name: user_totals
    primary_key: [user]
    buckets: 4
    columns:
      region: {agg: last_value}
      total: {agg: sum, from: amount}
    changelog: {topic: %[3]s}
checkpoint: {interval: 50ms}
---
job: {name: regions, parallelism: 2}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[3]s]
    format: upsert-json
    schema: {user: string, region: string, total: int64}
sink:
  table:
    name: region_totals
    primary_key: [region]
    buckets: 2
    columns:
      total: {agg: sum}
      users: {agg: count}
    changelog: {topic: %[4]s}
checkpoint: {interval: 50ms}
`

// chainRun is what runChain leaves for the checks: the tables' versions,
// B's positions at its checkpoints, and where to read the changelogs.
type chainRun struct {
	brokers                 []string
	aTopic, a2Topic, bTopic string
	as, a2s, bs             []export.Version // a2s: of the table on a2Topic, if any
	positions               *kafka.Positions // of B's source (nil: B has several)
	reg                     *prometheus.Registry
}

// runChain runs the jobs of spec (chainJobs, or a variant; a second
// upstream table, whose second column is the total too, may take the
// changelog topic %[5]s) in one runner (kfake, or the real Kafka of
// EBBFLOW_KAFKA_BROKERS) while 60 batches of perBatch orders of users
// users arrive, until B's last version names a version of each upstream
// table with its last one's end offsets (one of the same content), then
// stops them. With stopUpstream the upstream jobs stop first, once their
// tables hold every order (a final checkpoint, exported: their last
// versions are final); else they run on, and the wait ends when A's last
// version is of its current checkpoint and every export caught up.
func runChain(t *testing.T, spec string, users, perBatch int, stopUpstream bool) chainRun {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopic(t, brokers, 2)
	aTopic, bTopic, a2Topic := kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers)
	ps, err := pipelines.Load([]pipelines.File{{Name: "chain.yaml",
		Data: fmt.Appendf(nil, spec, strings.Join(brokers, ","), in, aTopic, bTopic, a2Topic)}}, pipelines.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e := NewEnv(Options{DataDir: t.TempDir(), Logger: testLogger(), Registerer: reg})
	if err := e.OpenTables(ps); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs, dones, exported := startJobs(t, ctx, e, ps)
	regions := []string{"eu", "us", "asia"}
	var amounts int64
	for batch := range 60 {
		var recs []*kgo.Record
		for i := range perBatch {
			u := (batch*7 + i*13) % users
			recs = append(recs, &kgo.Record{Topic: in, Value: fmt.Appendf(nil, `{"user":"u%d","region":%q,"amount":%d}`, u, regions[u%3], i%9+1)})
			amounts += int64(i%9 + 1)
		}
		kafkatest.Produce(t, brokers, recs...)
		time.Sleep(20 * time.Millisecond)
	}
	deadline := time.Now().Add(60 * time.Second)
	waitUntil := func(what string, cond func() bool) {
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not so after 60 s: %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if stopUpstream {
		// The upstream jobs (all but regions) read every order, then
		// stop with a final checkpoint; once it is exported, their last
		// versions are final.
		for i, p := range ps {
			if p.Spec.Job.Name == "regions" {
				continue
			}
			name := p.Spec.Sinks[0].Table.Name
			tab, _ := e.Table(name)
			waitUntil("table "+name+" holds every order", func() bool {
				var sum int64
				if err := tab.Scan(func(r aggmerge.Row) error { sum += r.Values[1].Int(); return nil }); err != nil {
					t.Fatal(err)
				}
				return sum == amounts
			})
			jobs[i].Stop()
			if err := <-dones[i]; err != nil {
				t.Fatal(err)
			}
			dones[i] = nil
		}
	}
	conn := kafka.Connection{Brokers: brokers}
	two := strings.Contains(spec, "%[5]s")
	var as, a2s, bs []export.Version
	last := func(vs []export.Version, u changelogfmt.UpstreamVersion) bool {
		return len(vs) > 0 && slices.ContainsFunc(vs, func(v export.Version) bool {
			return v.Version == u.Version && v.Topic == u.Topic && slices.Equal(v.EndOffsets, vs[len(vs)-1].EndOffsets)
		})
	}
	waitUntil("B's last version names its upstreams' last content", func() bool {
		if as, err = export.ReadVersions(ctx, conn, aTopic+".versions"); err != nil {
			t.Fatal(err)
		}
		if two {
			if a2s, err = export.ReadVersions(ctx, conn, a2Topic+".versions"); err != nil {
				t.Fatal(err)
			}
		}
		if bs, err = export.ReadVersions(ctx, conn, bTopic+".versions"); err != nil {
			t.Fatal(err)
		}
		if len(bs) == 0 || len(as) == 0 {
			return false
		}
		up := bs[len(bs)-1].Upstream
		caught := len(up) == 1 && last(as, up[0])
		if two {
			caught = len(up) == 2 && (last(as, up[0]) && last(a2s, up[1]) || last(as, up[1]) && last(a2s, up[0]))
		}
		if stopUpstream {
			return caught && exportedUpstream(e, bTopic)
		}
		// A runs on: its last version must be its current checkpoint.
		a, _ := e.Table("user_totals")
		return caught && e.ExportsCaughtUp() && as[len(as)-1].Writers[0].Checkpoint == a.Writers()[0].Checkpoint
	})
	for i, j := range jobs {
		if dones[i] == nil {
			continue
		}
		j.Stop()
		if err := <-dones[i]; err != nil {
			t.Fatal(err)
		}
	}
	e.ups.mu.Lock()
	srcs := slices.Collect(maps.Values(e.ups.mu.byJob["regions"]))
	e.ups.mu.Unlock()
	cancel()
	if err := <-exported; err != nil {
		t.Fatal(err)
	}
	run := chainRun{brokers: brokers, aTopic: aTopic, a2Topic: a2Topic, bTopic: bTopic, as: as, a2s: a2s, bs: bs, reg: reg}
	if len(srcs) == 1 {
		run.positions = srcs[0].Positions()
	}
	return run
}

// exportedUpstream reports whether the exporters of every table but the
// one on topic b exported their tables' logs to the end.
func exportedUpstream(e *Env, b string) bool {
	for _, ce := range e.exporters {
		if ce.spec.Topic == b {
			continue
		}
		done := ce.x.Exported()
		for bucket, end := range ce.table.LogEnds() {
			if done[bucket] < end {
				return false
			}
		}
	}
	return true
}

// TestChainedVersions runs A → B (runChain). Each version of B names
// the version of A that B's checkpoint had consumed completely: B's
// positions at that checkpoint are at or past its end offsets, and not
// past those of the next version that holds more. At the end B's last
// version names one with A's last content, and B's content at it is the
// aggregate of A's content there.
func TestChainedVersions(t *testing.T) {
	run := runChain(t, chainJobs, 50, 40, false)
	as, bs, aTopic, brokers, bTopic := run.as, run.bs, run.aTopic, run.brokers, run.bTopic
	positions := run.positions
	if positions == nil {
		t.Fatal("job regions has not one upstream tracker")
	}
	byNumber := map[uint64]*export.Version{}
	for i := range as {
		byNumber[as[i].Version] = &as[i]
	}
	checked := 0
	for _, v := range bs {
		at, ok := positions.At(barrier.CheckpointID(v.Writers[0].Checkpoint))
		if !ok {
			continue // older than the positions kept
		}
		pos := at[aTopic]
		covers := func(u *export.Version) bool { return u.Covers(func(p int32) int64 { return pos[p] }) }
		var next *export.Version
		switch {
		case len(v.Upstream) == 1 && v.Upstream[0].Version == 0: // none of A's read whole yet
			next = &as[0]
		case len(v.Upstream) == 1:
			up := v.Upstream[0]
			u := byNumber[up.Version]
			if up.Topic != aTopic || up.Table != "user_totals" || u == nil {
				t.Fatalf("B's version %d names upstream %+v, not a version of A", v.Version, up)
			}
			if !covers(u) {
				t.Fatalf("B's version %d (checkpoint %d) names A's version %d (ends %v), but B's positions are %v",
					v.Version, v.Writers[0].Checkpoint, u.Version, u.EndOffsets, pos)
			}
			// The next version with other end offsets: one with the
			// same ends (a checkpoint of A that changed nothing) may be
			// published after B looked, and holds what u holds.
			for n := up.Version + 1; byNumber[n] != nil; n++ {
				if !slices.Equal(byNumber[n].EndOffsets, u.EndOffsets) {
					next = byNumber[n]
					break
				}
			}
			checked++
		default:
			t.Fatalf("B's version %d names %d upstream versions: %+v", v.Version, len(v.Upstream), v.Upstream)
		}
		if next != nil && covers(next) {
			t.Fatalf("B's version %d (checkpoint %d) names %+v, but B's positions %v cover A's later version %d (ends %v)",
				v.Version, v.Writers[0].Checkpoint, v.Upstream, pos, next.Version, next.EndOffsets)
		}
	}
	t.Logf("A: %d versions; B: %d versions, %d checked against B's positions", len(as), len(bs), checked)
	if checked < 5 {
		t.Fatalf("only %d of B's versions could be checked against its positions", checked)
	}

	// B's content at its last version is the aggregate of A's at A's last.
	want := regionAggregate(kafkatest.Replay(t, kafkatest.ConsumeStable(t, brokers, aTopic), as[len(as)-1].EndOffsets, false))
	got := regionRows(kafkatest.Replay(t, kafkatest.ConsumeStable(t, brokers, bTopic), bs[len(bs)-1].EndOffsets, false))
	if !maps.Equal(got, want) {
		t.Fatalf("B at version %d: %v; the aggregate of A at version %d: %v", bs[len(bs)-1].Version, got, as[len(as)-1].Version, want)
	}
}

// regionAggregate is what B computes from A's rows (the plain model): per
// region, the sum of the users' totals and the number of users.
func regionAggregate(aRows map[string]map[string]any) map[string][2]float64 {
	want := map[string][2]float64{}
	for _, r := range aRows {
		s := want[r["region"].(string)]
		want[r["region"].(string)] = [2]float64{s[0] + r["total"].(float64), s[1] + 1}
	}
	return want
}

// regionRows reads B's rows as regionAggregate makes them.
func regionRows(bRows map[string]map[string]any) map[string][2]float64 {
	got := map[string][2]float64{}
	for _, r := range bRows {
		got[r["region"].(string)] = [2]float64{r["total"].(float64), r["users"].(float64)}
	}
	return got
}
