package build

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// eventTimeJobs: east and west total their inputs per user, with the
// Kafka timestamp as event time; all reads both changelogs (a union) and
// totals them again.
const eventTimeJobs = `
job: {name: east}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[2]s]
    format: json
    schema: {user: string, amount: int64}
    event_time: {kafka_timestamp: true}
sink:
  table:
    name: east_totals
    primary_key: [user]
    buckets: 2
    columns:
      total: {agg: sum, from: amount}
    changelog: {topic: %[4]s}
checkpoint: {interval: 50ms}
---
job: {name: west}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[3]s]
    format: json
    schema: {user: string, amount: int64}
    event_time: {kafka_timestamp: true}
sink:
  table:
    name: west_totals
    primary_key: [user]
    buckets: 2
    columns:
      total: {agg: sum, from: amount}
    changelog: {topic: %[5]s}
checkpoint: {interval: 50ms}
---
job: {name: all}
source:
  - kafka:
      brokers: [%[1]s]
      topics: [%[4]s]
      format: upsert-json
      schema: {user: string, total: int64}
  - kafka:
      brokers: [%[1]s]
      topics: [%[5]s]
      format: upsert-json
      schema: {user: string, total: int64}
sink:
  table:
    name: all_totals
    primary_key: [user]
    buckets: 2
    columns:
      total: {agg: sum}
    changelog: {topic: %[6]s}
checkpoint: {interval: 50ms}
`

// TestVersionsEventTime runs east, west → all (kfake, or the real Kafka of
// EBBFLOW_KAFKA_BROKERS) on inputs with chosen Kafka timestamps. A
// version of east or west carries its input's watermark at the checkpoint
// (the largest timestamp read minus 1 ns, in whole milliseconds); a
// version of all carries the least event time of the upstream versions it
// includes, so it follows whichever input is behind. Versions name the
// topics other than changelogs their jobs read.
func TestVersionsEventTime(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	east, west := kafkatest.NewTopic(t, brokers, 1), kafkatest.NewTopic(t, brokers, 1)
	eastCL, westCL, allCL := kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers)
	ps, err := pipelines.Load([]pipelines.File{{Name: "et.yaml",
		Data: fmt.Appendf(nil, eventTimeJobs, strings.Join(brokers, ","), east, west, eastCL, westCL, allCL)}}, pipelines.Options{})
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

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	produce := func(topic string, at ...time.Duration) {
		var recs []*kgo.Record
		for i, d := range at {
			recs = append(recs, &kgo.Record{Topic: topic, Timestamp: t0.Add(d), Value: fmt.Appendf(nil, `{"user":"u%d","amount":%d}`, i%3, i+1)})
		}
		kafkatest.Produce(t, brokers, recs...)
	}
	conn := kafka.Connection{Brokers: brokers}
	read := func(topic string) []export.Version {
		vs, err := export.ReadVersions(ctx, conn, topic+".versions")
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	last := func(vs []export.Version) export.Version {
		if len(vs) == 0 {
			return export.Version{}
		}
		return vs[len(vs)-1]
	}
	// await waits until east's, west's and all's newest versions carry the
	// given event times, all's naming the newest of east and west.
	await := func(wantEast, wantWest, wantAll int64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			e, w, a := last(read(eastCL)), last(read(westCL)), last(read(allCL))
			if e.EventTimeMs == wantEast && w.EventTimeMs == wantWest && a.EventTimeMs == wantAll &&
				len(a.Upstream) == 2 && a.Upstream[0].Version+a.Upstream[1].Version == e.Version+w.Version {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("newest versions: east at %d (want %d), west at %d (want %d), all at %d (want %d) naming %+v (east %d, west %d)",
					e.EventTimeMs, wantEast, w.EventTimeMs, wantWest, a.EventTimeMs, wantAll, a.Upstream, e.Version, w.Version)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	produce(east, time.Second, 3*time.Second, 2*time.Second, 5*time.Second)
	produce(west, 100*time.Millisecond, 3*time.Second)
	// west is behind: all follows it.
	await(ms(5*time.Second)-1, ms(3*time.Second)-1, ms(3*time.Second)-1)
	produce(west, 9*time.Second)
	// now east is.
	await(ms(5*time.Second)-1, ms(9*time.Second)-1, ms(5*time.Second)-1)

	// ebbflow_table_freshness_seconds is now minus the event time of the
	// table's last version.
	before := time.Now()
	fresh := freshness(t, reg)
	after := time.Now()
	for table, et := range map[string]int64{"east_totals": ms(5*time.Second) - 1, "west_totals": ms(9*time.Second) - 1, "all_totals": ms(5*time.Second) - 1} {
		lo, hi := before.Sub(time.UnixMilli(et)).Seconds(), after.Sub(time.UnixMilli(et)).Seconds()
		if f, ok := fresh[table]; !ok || f < lo || f > hi {
			t.Fatalf("ebbflow_table_freshness_seconds{table=%q} = %v (present %v), want within [%v, %v]", table, f, ok, lo, hi)
		}
	}

	// Every version of all carries the least event time of the versions
	// it names, 0 while it names no version of one of its inputs (read
	// first: east and west publish on).
	alls := read(allCL)
	byTopic := map[string]map[uint64]int64{}
	for topic, input := range map[string]string{eastCL: east, westCL: west} {
		byTopic[topic] = map[uint64]int64{}
		for _, v := range read(topic) {
			if len(v.Sources) != 1 || v.Sources[0] != input {
				t.Fatalf("%s version %d names sources %q, want [%s]", v.Table, v.Version, v.Sources, input)
			}
			byTopic[topic][v.Version] = v.EventTimeMs
			if v.EventTimeMs > ms(9*time.Second) {
				t.Fatalf("%s version %d at event time %d, past every input", v.Table, v.Version, v.EventTimeMs)
			}
		}
	}
	for _, v := range alls {
		want := int64(0)
		if len(v.Upstream) == 2 {
			want = min(byTopic[v.Upstream[0].Topic][v.Upstream[0].Version], byTopic[v.Upstream[1].Topic][v.Upstream[1].Version])
		}
		if len(v.Sources) != 0 {
			t.Fatalf("all's version %d names sources %q: it reads only changelogs", v.Version, v.Sources)
		}
		if v.EventTimeMs != want {
			t.Fatalf("all's version %d at event time %d, want %d (the least of %+v)", v.Version, v.EventTimeMs, want, v.Upstream)
		}
	}
	for _, j := range jobs {
		j.Stop()
	}
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-exported; err != nil {
		t.Fatal(err)
	}
}

// freshness reads ebbflow_table_freshness_seconds per table.
func freshness(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ebbflow_table_freshness_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// TestVersionsEventTimeRestart stops east once its versions cover its
// input, and starts it again from its checkpoint in a new Env on the same
// data directory, without periodic checkpoints: the restore records the
// restored checkpoint's event time with it in the table (what a version
// cut from it carries), not 0.
func TestVersionsEventTimeRestart(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	in, cl := kafkatest.NewTopic(t, brokers, 1), kafkatest.TopicName(t, brokers)
	spec := fmt.Appendf(nil, strings.SplitN(eventTimeJobs, "---", 2)[0], strings.Join(brokers, ","), in, "", cl)
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	want := t0.Add(7*time.Second).UnixMilli() - 1
	produce := func(user string, at time.Duration) {
		kafkatest.Produce(t, brokers, &kgo.Record{Topic: in, Timestamp: t0.Add(at), Value: fmt.Appendf(nil, `{"user":%q,"amount":1}`, user)})
	}
	produce("u", 7*time.Second)
	produce("v", 6*time.Second)
	conn := kafka.Connection{Brokers: brokers}
	for run, set := range [][]string{nil, {"checkpoint.interval=0s"}} {
		ps, err := pipelines.Load([]pipelines.File{{Name: "east.yaml", Data: spec}}, pipelines.Options{Set: set})
		if err != nil {
			t.Fatal(err)
		}
		e := NewEnv(Options{DataDir: dir, Logger: testLogger()})
		if err := e.OpenTables(ps); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		exported := make(chan error, 1)
		go func() { exported <- e.RunExporters(ctx) }()
		j, done := startJob(t, ctx, e, ps[0])
		stop := func() {
			j.Stop()
			err := <-done
			cancel()
			if err := errors.Join(err, <-exported, e.Close()); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		tbl, _ := e.Table("east_totals")
		for run == 0 {
			vs, err := export.ReadVersions(ctx, conn, cl+".versions")
			if err != nil {
				stop()
				t.Fatal(err)
			}
			if len(vs) > 0 && vs[len(vs)-1].EventTimeMs == want {
				break
			}
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("versions %+v do not reach event time %d", vs, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if run == 1 {
			// A record read after the restore: the sink's undo is done.
			produce("w", 8*time.Second)
			for tbl.Count() < 3 {
				if time.Now().After(deadline) {
					stop()
					t.Fatalf("the record after the restore does not reach the table (%d rows)", tbl.Count())
				}
				time.Sleep(20 * time.Millisecond)
			}
			for _, r := range tbl.Writers() {
				if r.Epoch != 2 || !r.Committed || r.EventTimeMs != want {
					stop()
					t.Fatalf("after the restore: writer %+v, want epoch 2 at event time %d", r, want)
				}
			}
		}
		stop()
	}
}
