package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
)

// topologyA and topologyB are the jobs of TestTopology: A totals its input
// (event time: the Kafka timestamp) into table a, B reads a's changelog
// into table b.
const (
	topologyA = `
job: {name: A%[4]s}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[2]s]
    schema: {user: string, amount: int64}
    event_time: {kafka_timestamp: true}
sink:
  table:
    name: a%[4]s
    primary_key: [user]
    buckets: 2
    columns: {total: {agg: sum, from: amount}}
    changelog: {brokers: [%[1]s], topic: %[3]s}
checkpoint: {interval: 100ms}
`
	topologyB = `
job: {name: B%[4]s}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[2]s]
    format: upsert-json
    discovery_interval: 100ms
    schema: {user: string, total: int64}
sink:
  table:
    name: b%[4]s
    primary_key: [user]
    buckets: 2
    columns: {total: {agg: sum}}
    changelog: {brokers: [%[1]s], topic: %[3]s}
checkpoint: {interval: 100ms}
`
)

// consistentAt returns the consistent version of the part of top that
// table (a node id) is in, or nil.
func consistentAt(top *topology, table string) *topoConsistent {
	for i, c := range top.Consistent {
		if slices.Contains(c.Tables, table) {
			return &top.Consistent[i]
		}
	}
	return nil
}

// metricValue returns the value of the sample series (name and labels as
// the exposition format prints them) in metrics.
func metricValue(metrics, series string) (float64, bool) {
	for line := range strings.Lines(metrics) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestTopology runs A → a → B → b, each job in a runner process of its
// own on one Kafka (kfake, or EBBFLOW_KAFKA_BROKERS), on input with
// chosen timestamps. `runner topology` asked of either runner (its
// /api/v1/topology) and read from Kafka alone (--brokers, no job file)
// shows the same graph; b's newest version names a version of a, both
// cover the input's watermark, and freshness is exactly the topology's
// time minus it.
func TestTopology(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	list := strings.Join(brokers, ",")
	in := kafkatest.NewTopic(t, brokers, 1)
	aCL, bCL := kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers)
	dir := t.TempDir()
	runners := map[string]string{} // job → data dir
	// Names of their own: on a shared Kafka, tables and jobs of other runs
	// are in the graph too.
	sfx := "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ta, tb, ja, jb := "a"+sfx, "b"+sfx, "A"+sfx, "B"+sfx
	for job, spec := range map[string]string{"A": fmt.Sprintf(topologyA, list, in, aCL, sfx), "B": fmt.Sprintf(topologyB, list, aCL, bCL, sfx)} {
		file := filepath.Join(dir, job+".yaml")
		if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		runners[job] = filepath.Join(dir, "data-"+job)
		c := start(t, nil, "run", "-f", file, "--data-dir", runners[job], "--http-address", "127.0.0.1:0", "--summary", "0")
		waitFor(t, c, 60*time.Second, "runner "+job+" to serve", func() bool { return liveRunner(runners[job]) != "" })
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	for i, d := range []time.Duration{time.Second, 4 * time.Second, 2 * time.Second} {
		recs = append(recs, &kgo.Record{Topic: in, Timestamp: t0.Add(d), Value: fmt.Appendf(nil, `{"user":"u%d","amount":%d}`, i%2, i+1)})
	}
	kafkatest.Produce(t, brokers, recs...)
	// The watermark after the largest timestamp, 4 s: 1 ns before it.
	eventTime := t0.Add(4*time.Second - time.Millisecond)

	read := func(args ...string) *topology {
		t.Helper()
		out, stderr, code := runCLIErr(t, nil, append([]string{"topology", "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("topology %v: exit %d: %s", args, code, stderr)
		}
		var top topology
		if err := json.Unmarshal([]byte(out), &top); err != nil {
			t.Fatalf("topology %v: %v:\n%s", args, err, out)
		}
		return &top
	}
	tableOf := func(top *topology, name string) *topoTable {
		for i := range top.Tables {
			if top.Tables[i].Table == name {
				return &top.Tables[i]
			}
		}
		return nil
	}
	covered := func(top *topology) bool {
		a, b := tableOf(top, ta), tableOf(top, tb)
		return a != nil && b != nil && a.EventTime != nil && b.EventTime != nil &&
			a.EventTime.Equal(eventTime) && b.EventTime.Equal(eventTime) &&
			consistentAt(top, a.ID) != nil && consistentAt(top, a.ID).EventTime != nil && consistentAt(top, a.ID).EventTime.Equal(eventTime)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !covered(read("--brokers", list)) {
		if time.Now().After(deadline) {
			top := read("--brokers", list)
			t.Fatalf("the tables do not reach event time %s: %+v", eventTime, top.Tables)
		}
		time.Sleep(100 * time.Millisecond)
	}

	want := []topoEdge{
		{From: "changelog:" + aCL, To: "job:" + jb},
		{From: "job:" + ja, To: "table:" + ta},
		{From: "job:" + jb, To: "table:" + tb},
		{From: "source:" + in, To: "job:" + ja},
		{From: "table:" + ta, To: "changelog:" + aCL},
		{From: "table:" + tb, To: "changelog:" + bCL},
	}
	slices.SortFunc(want, func(x, y topoEdge) int { return cmp.Or(strings.Compare(x.From, y.From), strings.Compare(x.To, y.To)) })
	ours := map[string]bool{}
	for _, e := range want {
		ours[e.From], ours[e.To] = true, true
	}
	for name, args := range map[string][]string{
		"kafka":    {"--brokers", list},
		"runner A": {"--data-dir", runners["A"]},
		"runner B": {"--data-dir", runners["B"]},
	} {
		before := time.Now()
		top := read(args...)
		if top.Now.Before(before.Add(-time.Millisecond)) || top.Now.After(time.Now()) {
			t.Fatalf("%s: topology at %s, read between %s and now", name, top.Now, before)
		}
		edges := slices.DeleteFunc(slices.Clone(top.Edges), func(e topoEdge) bool { return !ours[e.From] && !ours[e.To] })
		if !slices.Equal(edges, want) {
			t.Fatalf("%s: edges\n%+v\nwant\n%+v", name, edges, want)
		}
		nodes := 0
		for _, n := range top.Nodes {
			if ours[n.ID] {
				nodes++
			}
		}
		if nodes != len(ours) {
			t.Fatalf("%s: nodes %+v, want the %d of the edges", name, top.Nodes, len(ours))
		}
		a, b := tableOf(top, ta), tableOf(top, tb)
		if a.Version == nil || b.Version == nil || a.Changelog != aCL || b.Changelog != bCL {
			t.Fatalf("%s: tables %+v", name, top.Tables)
		}
		// (b's may name a version of a newer than the one read of a: each
		// table is read at its newest, one after the other.)
		if len(a.Upstream) != 0 || len(b.Upstream) != 1 || b.Upstream[0].Table != ta || b.Upstream[0].Topic != aCL ||
			b.Upstream[0].Version == 0 {
			t.Fatalf("%s: a at version %d with upstream %+v, b with upstream %+v", name, a.Version.Version, a.Upstream, b.Upstream)
		}
		for _, tt := range []*topoTable{a, b} {
			if !tt.EventTime.Equal(eventTime) {
				t.Fatalf("%s: table %s at event time %s, want %s", name, tt.Table, tt.EventTime, eventTime)
			}
			if want := top.Now.Sub(eventTime).Seconds(); math.Abs(*tt.FreshnessSeconds-want) > 1e-3 {
				t.Fatalf("%s: table %s freshness %vs, want %vs (now %s minus %s)", name, tt.Table, *tt.FreshnessSeconds, want, top.Now, eventTime)
			}
		}
		// The consistent version of the part {a, b}: b's version derived
		// exactly from a's (a idle since the input), covering the same.
		c := consistentAt(top, a.ID)
		if c == nil || len(c.Tables) != 2 || !slices.Contains(c.Tables, b.ID) || c.Error != "" ||
			a.ConsistentVersion == nil || b.ConsistentVersion == nil || c.EventTime == nil || !c.EventTime.Equal(eventTime) {
			t.Fatalf("%s: the consistent version of a and b: %+v (a at %v, b at %v); want both at event time %s", name, c, a.ConsistentVersion, b.ConsistentVersion, eventTime)
		}
		for _, f := range []*float64{c.FreshnessSeconds, a.ConsistentFreshnessSeconds, b.ConsistentFreshnessSeconds} {
			if want := top.Now.Sub(eventTime).Seconds(); f == nil || math.Abs(*f-want) > 1e-3 {
				t.Fatalf("%s: consistent freshness %v, want %vs", name, f, want)
			}
		}
	}

	// Runner B's metric: the same freshness, of its table b.
	before := time.Now()
	_, metrics := httpGet(t, "http://"+liveRunner(runners["B"])+"/metrics")
	after := time.Now()
	got, ok := metricValue(metrics, `ebbflow_topology_freshness_seconds{table="`+tb+`"}`)
	if !ok || got < before.Sub(eventTime).Seconds()-1e-3 || got > after.Sub(eventTime).Seconds()+1e-3 {
		t.Fatalf("runner B: ebbflow_topology_freshness_seconds of %s: %v (found %v); want between %v and %v",
			tb, got, ok, before.Sub(eventTime).Seconds(), after.Sub(eventTime).Seconds())
	}

	// The table output names the same.
	out, code := runCLI(t, nil, "topology", "--brokers", list)
	if code != 0 {
		t.Fatalf("topology: exit %d", code)
	}
	for _, s := range []string{"job:" + ja + " → table:" + ta, "changelog:" + aCL + " → job:" + jb, eventTime.Format(time.RFC3339Nano), "CONSISTENT"} {
		if !strings.Contains(out, s) {
			t.Fatalf("topology output lacks %q:\n%s", s, out)
		}
	}
}
