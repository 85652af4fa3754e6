package build

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// jobFile is a datagen job: revenue and counts per region, with a filter
// and a map, and a column the writer computes from a map field.
const jobFile = `
job: {name: gen, parallelism: %d}
source:
  datagen:
    seed: 7
    rate: 0
    count: %d
    topic: "%s"
    fields:
      n: {sequence: {}}
      region: {one_of: [eu, us, asia], weights: [3, 2, 1]}
      amount: {uniform: {min: 1, max: 100}}
transforms:
  - filter: amount > 10
  - map: {cents: amount * 100}
sink:
  table:
    name: regions
    primary_key: [region]
    buckets: 4
    columns:
      revenue: {agg: sum, from: cents}
      orders: {agg: count}
      top: {agg: max, from: amount}
      last_n: {agg: max, from: n}
checkpoint: {interval: 50ms}
`

type regionTotal struct{ revenue, orders, top, lastN int64 }

// oracle computes the table from the generator directly.
func oracle(t *testing.T, p *pipelines.Pipeline, count int64) map[string]regionTotal {
	t.Helper()
	gen, err := p.NewGenerator(0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]regionTotal{}
	for n := range count {
		r := gen.Row(n)
		amount := r[2].(int64)
		if amount <= 10 {
			continue
		}
		w := want[r[1].(string)]
		w.revenue += amount * 100
		w.orders++
		w.top = max(w.top, amount)
		w.lastN = max(w.lastN, n)
		want[r[1].(string)] = w
	}
	return want
}

func scanRegions(t *testing.T, tab *aggmerge.Table) map[string]regionTotal {
	t.Helper()
	got := map[string]regionTotal{}
	err := tab.Scan(func(r aggmerge.Row) error {
		got[r.Key[0].Str()] = regionTotal{r.Values[0].Int(), r.Values[1].Int(), r.Values[2].Int(), r.Values[3].Int()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func load(t *testing.T, src string) *pipelines.Pipeline {
	t.Helper()
	ps, err := pipelines.Load([]pipelines.File{{Name: "job.yaml", Data: []byte(src)}}, pipelines.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

func newEnv(t *testing.T, dir string, p *pipelines.Pipeline) *Env {
	t.Helper()
	return openEnv(t, Options{DataDir: dir}, p)
}

// openEnv opens p's tables in a new Env with opts (the test's logger when
// it has none); the caller closes it.
func openEnv(t *testing.T, opts Options, p *pipelines.Pipeline) *Env {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	e := NewEnv(opts)
	if err := e.OpenTables([]*pipelines.Pipeline{p}); err != nil {
		t.Fatal(err)
	}
	return e
}

// startJob builds p's job in e, from its latest checkpoint, and runs it
// under ctx; the channel receives Run's error.
func startJob(t testing.TB, ctx context.Context, e *Env, p *pipelines.Pipeline) (*Job, <-chan error) {
	t.Helper()
	j, err := e.Build(p, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	return j, done
}

// startJobs runs e's exporters and the job of each of ps under ctx:
// exported receives RunExporters' error, dones[i] the Run error of job i.
func startJobs(t testing.TB, ctx context.Context, e *Env, ps []*pipelines.Pipeline) (jobs []*Job, dones []<-chan error, exported <-chan error) {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- e.RunExporters(ctx) }()
	for _, p := range ps {
		j, done := startJob(t, ctx, e, p)
		jobs, dones = append(jobs, j), append(dones, done)
	}
	return jobs, dones, ch
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// TestDatagenStraight runs a bounded datagen job to its end, then again
// after a restore at another parallelism (nothing left to make), and
// checks the table against the generator.
func TestDatagenStraight(t *testing.T) {
	const count = 20_000
	dir := t.TempDir()
	p := load(t, fmt.Sprintf(jobFile, 3, count, ""))
	want := oracle(t, p, count)
	for _, par := range []int{3, 2} {
		p := load(t, fmt.Sprintf(jobFile, par, count, ""))
		e := newEnv(t, dir, p)
		runRegions(t, e, p, want)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFlushInterval: a table sink's flush_interval is its writer's
// FlushInterval (100ms by default, checkpoint: writer.FlushAtCheckpoint),
// and a bounded job flushing at checkpoints only ends with the exact table.
func TestFlushInterval(t *testing.T) {
	const count = 20_000
	src := fmt.Sprintf(jobFile, 2, count, "")
	for _, tc := range []struct {
		yaml string
		want time.Duration
	}{{"", 100 * time.Millisecond}, {"    flush_interval: 250ms\n", 250 * time.Millisecond}, {"    flush_interval: checkpoint\n", writer.FlushAtCheckpoint}} {
		p := load(t, strings.Replace(src, "    buckets: 4\n", "    buckets: 4\n"+tc.yaml, 1))
		e := newEnv(t, t.TempDir(), p)
		cfg, err := e.writerConfig(&Job{p: p}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.FlushInterval != tc.want {
			t.Fatalf("%q: the writer's FlushInterval is %v, want %v", tc.yaml, cfg.FlushInterval, tc.want)
		}
		if tc.want == writer.FlushAtCheckpoint {
			runRegions(t, e, p, oracle(t, p, count))
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDatagenStopAndResume stops a rate-limited job early with a final
// checkpoint, resumes it at another parallelism (the lanes are dealt out
// again) without limit, and checks the finished table.
func TestDatagenStopAndResume(t *testing.T) {
	const count = 30_000
	dir := t.TempDir()
	p := load(t, fmt.Sprintf(jobFile, 3, count, ""))
	want := oracle(t, p, count)
	// first run: at 20,000 records/s, stopped after a moment
	ps, err := pipelines.Load([]pipelines.File{{Name: "job.yaml", Data: []byte(fmt.Sprintf(jobFile, 2, count, ""))}},
		pipelines.Options{Set: []string{"source.datagen.rate=20000"}})
	if err != nil {
		t.Fatal(err)
	}
	slow := ps[0]
	e := newEnv(t, dir, slow)
	j, err := e.Build(slow, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, j.Stop)
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	tab, _ := e.Table("regions")
	partial := scanRegions(t, tab)
	var orders int64
	for _, r := range partial {
		orders += r.orders
	}
	var all int64
	for _, r := range want {
		all += r.orders
	}
	if orders == 0 || orders >= all {
		t.Fatalf("first run wrote %d of %d orders; want a part", orders, all)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = newEnv(t, dir, p)
	defer e.Close()
	j, err = e.Build(p, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	tab, _ = e.Table("regions")
	checkRegions(t, scanRegions(t, tab), want)
}

// TestDatagenIntoTopic produces into a topic of the embedded broker and
// reads it back, stopping when the table holds every record.
func TestDatagenIntoTopic(t *testing.T) {
	const count = 5_000
	dir := t.TempDir()
	p := load(t, fmt.Sprintf(jobFile, 2, count, "generated"))
	want := oracle(t, p, count)
	e := newEnv(t, dir, p)
	defer e.Close()
	j, err := e.Build(p, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Run(context.Background()) }()
	tab, _ := e.Table("regions")
	deadline := time.Now().Add(40 * time.Second)
	for !equalRegions(scanRegions(t, tab), want) {
		if time.Now().After(deadline) {
			j.Stop()
			<-done
			checkRegions(t, scanRegions(t, tab), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !j.Ready() {
		t.Error("job not ready after writing every record")
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkRegions(t, scanRegions(t, tab), want)
}

func equalRegions(got, want map[string]regionTotal) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		if got[k] != w {
			return false
		}
	}
	return true
}

// runRegions runs p's bounded job in e to its end, from its latest
// checkpoint, and checks its regions table against want.
func runRegions(t *testing.T, e *Env, p *pipelines.Pipeline, want map[string]regionTotal) {
	t.Helper()
	j, err := e.Build(p, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := j.Run(ctx); err != nil {
		t.Fatal(err)
	}
	tab, _ := e.Table("regions")
	checkRegions(t, scanRegions(t, tab), want)
}

func checkRegions(t *testing.T, got, want map[string]regionTotal) {
	t.Helper()
	if !equalRegions(got, want) {
		t.Fatalf("table\n got %v\nwant %v", got, want)
	}
}

// TestLogRetention: a job's writer truncates the table's log below its
// oldest retained checkpoint, and a changelog removed from the job (its
// exporter's hold left in the table) holds the log no more.
func TestLogRetention(t *testing.T) {
	const count = 10_000
	dir := t.TempDir()
	src := strings.Replace(fmt.Sprintf(jobFile, 2, count, ""), "rate: 0", "rate: 20000", 1)
	src = strings.Replace(src, "checkpoint: {interval: 50ms}", "checkpoint: {interval: 50ms, retain: 1}", 1)
	p := load(t, src)
	e := newEnv(t, dir, p)
	tab, _ := e.Table("regions")
	// An exporter of an earlier version of the job held the whole log.
	if err := tab.Hold(export.DefaultTransactionalID("regions"), map[int]uint64{0: 0, 1: 0, 2: 0, 3: 0}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = newEnv(t, dir, p)
	defer e.Close()
	runRegions(t, e, p, oracle(t, p, count))
	tab, _ = e.Table("regions")
	truncated := 0
	for b := range 4 {
		start, end, err := tab.LogOffsets(b)
		if err != nil {
			t.Fatal(err)
		}
		if start > 0 {
			truncated++
		}
		t.Logf("bucket %d: log [%d, %d)", b, start, end)
	}
	if truncated == 0 {
		t.Fatal("no bucket's log was truncated")
	}
}
