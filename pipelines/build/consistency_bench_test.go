package build

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

var (
	benchFreshFor  = flag.Duration("fresh.for", 30*time.Second, "how long BenchmarkConsistentFreshness samples the freshness (after a warm-up of 10 s)")
	benchFreshRate = flag.Int("fresh.rate", 5_000, "records per second BenchmarkConsistentFreshness feeds A")
	benchDownCkpt  = flag.Duration("chain.downstream-interval", time.Second, "the checkpoint interval of B and C in the A → B → C benchmarks (A's is 1s)")
)

// benchChain is A → B → C, one table of 100k users each: A totals its
// input per user (event time: the Kafka timestamp), B and C copy their
// upstream table's changelog, aligned on its versions; every job
// checkpoints every second (B and C: -chain.downstream-interval).
const benchChain = `
job: {name: bench_a}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[2]s]
    format: json
    schema: {user: string, amount: int64}
    event_time: {kafka_timestamp: true}
sink:
  table:
    name: bench_a
    primary_key: [user]
    buckets: 4
    columns: {total: {agg: sum, from: amount}}
    changelog: {topic: %[3]s}
checkpoint: {interval: 1s}
---
job: {name: bench_b}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[3]s]
    format: upsert-json
    align: versions
    schema: {user: string, total: int64}
sink:
  table:
    name: bench_b
    primary_key: [user]
    buckets: 4
    columns: {total: {agg: sum}}
    changelog: {topic: %[4]s}
checkpoint: {interval: %[6]s}
---
job: {name: bench_c}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[4]s]
    format: upsert-json
    align: versions
    schema: {user: string, total: int64}
sink:
  table:
    name: bench_c
    primary_key: [user]
    buckets: 4
    columns: {total: {agg: sum}}
    changelog: {topic: %[5]s}
checkpoint: {interval: %[6]s}
`

// benchUsers is the rows of each table of benchChain.
const benchUsers = 100_000

// chain is benchChain running in one Env, its input preloaded with one
// record per user (kafkatest.Preload).
type chain struct {
	brokers []string
	input   string
	topics  []string // the changelogs of A, B and C
	env     *Env
	stop    func() // stops the jobs and the exporters and waits for them
}

// startChain starts benchChain and waits until the consistent version of
// A, B and C holds the preloaded input whole.
func startChain(b *testing.B) *chain {
	brokers := kafkatest.Brokers(b)
	c := &chain{brokers: brokers, input: kafkatest.NewTopic(b, brokers, 4)}
	for range 3 {
		c.topics = append(c.topics, kafkatest.TopicName(b, brokers))
	}
	kafkatest.Preload(b, brokers, c.input, benchUsers, 4)
	ps, err := pipelines.Load([]pipelines.File{{Name: "chain.yaml",
		Data: fmt.Appendf(nil, benchChain, strings.Join(brokers, ","), c.input, c.topics[0], c.topics[1], c.topics[2], *benchDownCkpt)}}, pipelines.Options{})
	if err != nil {
		b.Fatal(err)
	}
	c.env = NewEnv(Options{DataDir: b.TempDir(), Logger: testLogger()})
	if err := c.env.OpenTables(ps); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	exported := make(chan error, 1)
	go func() { exported <- c.env.RunExporters(ctx) }()
	var jobs []*Job
	var dones []<-chan error
	for _, p := range ps {
		j, done := startJob(b, ctx, c.env, p)
		jobs, dones = append(jobs, j), append(dones, done)
	}
	c.stop = func() {
		for _, j := range jobs {
			j.Stop()
		}
		for _, d := range dones {
			if err := <-d; err != nil {
				b.Error(err)
			}
		}
		cancel()
		if err := <-exported; err != nil && !errors.Is(err, context.Canceled) {
			b.Error(err)
		}
		if err := c.env.Close(); err != nil {
			b.Error(err)
		}
	}
	b.Cleanup(c.stop)
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		s, err := c.env.Snapshot(ctx, []string{"bench_a", "bench_b", "bench_c"}, false)
		if err == nil && s.Tables[2].Rows.Len() == benchUsers {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("no consistent snapshot of A, B and C holds the %d users after 5 minutes (last: %v)", benchUsers, err)
		}
	}
	return c
}

// BenchmarkConsistentSnapshot times a consistent snapshot of A → B → C
// (100k rows each) from the runner hosting the three tables (Env.Snapshot:
// the versions read and chosen, then each table as of its version from
// the table and its log), and from Kafka alone (export.ReadSnapshot: each
// changelog read to the version's end offsets), until every row of the
// three is in hand as a kafka.Row (Rows.Each, the tables at once): the
// hosting runner's rows are made as they are read, so the snapshot alone
// would leave that out. The jobs run on, idle. Reports p50, p90 and max
// in ms, and the p50 of the snapshot alone (capture-p50-ms); every
// snapshot is checked (three tables of 100k rows, each row of C equal to
// B's and A's).
//
//	go test ./pipelines/build -run '^$' -bench ConsistentSnapshot -benchtime 20x
func BenchmarkConsistentSnapshot(b *testing.B) {
	c := startChain(b)
	ctx := context.Background()
	for _, path := range []string{"hosting-runner", "kafka"} {
		b.Run(path, func(b *testing.B) {
			var took, captured []time.Duration
			for b.Loop() {
				start := time.Now()
				var s *export.Snapshot
				var err error
				if path == "kafka" {
					s, err = export.ReadSnapshot(ctx, export.SnapshotConfig{Kafka: kafka.Connection{Brokers: c.brokers}, Topics: c.topics})
				} else {
					s, err = c.env.Snapshot(ctx, []string{"bench_a", "bench_b", "bench_c"}, false)
				}
				captured = append(captured, time.Since(start))
				var made []int
				if err == nil {
					made, err = makeRows(s)
				}
				took = append(took, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				for i, ts := range s.Tables {
					if made[i] != benchUsers || ts.Rows.Len() != benchUsers || ts.Local != (path != "kafka") {
						b.Fatalf("%s: %s at version %d: %d rows made of Len %d (local %v), want %d", path, ts.Topic, ts.Version.Version, made[i], ts.Rows.Len(), ts.Local, benchUsers)
					}
				}
				a, bt, ct := tableRows(b, s.Tables[0]), tableRows(b, s.Tables[1]), tableRows(b, s.Tables[2])
				if !sameSnapshotRows(a, bt) || !sameSnapshotRows(bt, ct) {
					b.Fatalf("%s: the rows of A, B and C at versions %d, %d, %d differ", path,
						s.Tables[0].Version.Version, s.Tables[1].Version.Version, s.Tables[2].Version.Version)
				}
			}
			reportQuantiles(b, took)
			slices.Sort(captured)
			b.ReportMetric(float64(captured[len(captured)/2].Microseconds())/1000, "capture-p50-ms")
		})
	}
}

// makeRows makes every row of every table of s (Rows.Each), the tables at
// once, and returns how many each has.
func makeRows(s *export.Snapshot) ([]int, error) {
	made := make([]int, len(s.Tables))
	errs := make([]error, len(s.Tables))
	var wg sync.WaitGroup
	for i := range s.Tables {
		wg.Go(func() {
			errs[i] = s.Tables[i].Rows.Each(func(string, kafka.Row) error { made[i]++; return nil })
		})
	}
	wg.Wait()
	return made, errors.Join(errs...)
}

// reportQuantiles reports p50, p90 and the max of ds in ms.
func reportQuantiles(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.9), "p90-ms")
	b.ReportMetric(q(1), "max-ms")
}

// BenchmarkConsistentFreshness measures the end-to-end freshness of the
// consistent version of A → B → C (1 s checkpoints, B and C aligned):
// A is fed -fresh.rate records per second (Kafka timestamp: the time it
// is produced, over the 100k users); after a warm-up of 10 s, every 100 ms
// for -fresh.for the newest consistent version of the three is chosen
// (export.ChooseConsistent, as `runner topology` and
// ebbflow_topology_freshness_seconds do) and its freshness taken: now
// minus the event time every table of it covers. Reports p50, p90 and max
// in ms, the samples without a consistent version, and the p50 of each
// table's newest version's freshness (where the time goes).
//
//	go test ./pipelines/build -run '^$' -bench ConsistentFreshness -benchtime 1x
func BenchmarkConsistentFreshness(b *testing.B) {
	c := startChain(b)
	readers, err := export.NewVersionsReaders(kafka.Connection{Brokers: c.brokers}, 1000)
	if err != nil {
		b.Fatal(err)
	}
	defer readers.Close()
	vtopics := make([]string, len(c.topics))
	for i, t := range c.topics {
		vtopics[i] = changelogfmt.VersionsTopic(t)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the feed, stopped by cancel
		defer wg.Done()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.DefaultProduceTopic(c.input))
		if err != nil {
			b.Error(err)
			return
		}
		defer cl.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		const tick = 10 * time.Millisecond
		perTick := max(1, *benchFreshRate*int(tick)/int(time.Second))
		for t := time.NewTicker(tick); ctx.Err() == nil; <-t.C {
			for range perTick {
				u := rng.IntN(benchUsers)
				cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "u%05d", u), Timestamp: time.Now(),
					Value: fmt.Appendf(nil, `{"user":"u%05d","amount":%d}`, u, rng.IntN(100))}, nil)
			}
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	var fresh []time.Duration
	newest := make([][]time.Duration, len(c.topics)) // per table, of its newest version
	var none int
	for b.Loop() {
		time.Sleep(10 * time.Second)
		for end := time.Now().Add(*benchFreshFor); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			var tables []export.TableVersions
			now := time.Now()
			for i, r := range readers.Read(ctx, vtopics) {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
				tables = append(tables, export.TableVersions{Topic: c.topics[i], Versions: r.Versions})
				if n := len(r.Versions); n > 0 {
					if d, ok := export.Freshness(now, &r.Versions[n-1]); ok {
						newest[i] = append(newest[i], d)
					}
				}
			}
			parts := export.ChooseConsistent(tables)
			if len(parts) != 1 {
				b.Fatalf("%d parts of A → B → C: %+v", len(parts), parts)
			}
			d, ok := parts[0].Freshness(now)
			if !ok {
				none++
				continue
			}
			fresh = append(fresh, d)
		}
	}
	if len(fresh) == 0 {
		b.Fatalf("no consistent version with an event time in %d samples", none)
	}
	reportQuantiles(b, fresh)
	var tables []export.TableVersions
	for i, r := range readers.Read(ctx, vtopics) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		tables = append(tables, export.TableVersions{Topic: c.topics[i], Versions: r.Versions})
	}
	for i, name := range []string{"ab", "bc"} {
		delays, gaps := hopDelays(tables[i], tables[i+1])
		for _, m := range []struct {
			ds   []time.Duration
			name string
		}{{delays, "hop-" + name}, {gaps, "gap-" + name[1:]}} {
			if len(m.ds) > 0 {
				slices.Sort(m.ds)
				b.ReportMetric(float64(m.ds[len(m.ds)/2].Milliseconds()), m.name+"-p50-ms")
			}
		}
	}
	for i, name := range []string{"a", "b", "c"} {
		if ds := newest[i]; len(ds) > 0 {
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Milliseconds()), name+"-newest-p50-ms")
		}
	}
	b.ReportMetric(float64(len(fresh)), "samples")
	b.ReportMetric(float64(none), "none")
}

// hopDelays are, for each version of up that a version of down
// includes, the time from its commit to the commit of the first version of
// down that includes it (or a newer one): what one aligned hop costs (the
// alignment's schedule, the checkpoint and the export). gaps are the times
// between down's versions that include new upstream versions.
func hopDelays(up, down export.TableVersions) (delays, gaps []time.Duration) {
	var covered uint64 // the newest version of up included so far
	var last time.Time
	for _, v := range down.Versions {
		for _, u := range v.Upstream {
			if u.Topic != up.Topic || u.Version <= covered {
				continue
			}
			for _, w := range up.Versions {
				if w.Version > covered && w.Version <= u.Version && covered > 0 {
					delays = append(delays, v.CommitTime.Sub(w.CommitTime))
				}
			}
			if !last.IsZero() {
				gaps = append(gaps, v.CommitTime.Sub(last))
			}
			covered, last = u.Version, v.CommitTime
		}
	}
	return delays, gaps
}
