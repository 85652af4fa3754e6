package examples

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// load reads a job file of this folder with overrides.
func load(t *testing.T, path string, sets ...string) *pipelines.Pipeline {
	t.Helper()
	files, err := pipelines.ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := pipelines.Load(files, pipelines.Options{Set: sets})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

// start opens the job's tables in a fresh data directory and runs it in
// the background; wait returns Run's error.
func start(t *testing.T, p *pipelines.Pipeline) (env *build.Env, job *build.Job, wait func() error) {
	t.Helper()
	env = build.NewEnv(build.Options{DataDir: t.TempDir()})
	if err := env.OpenTables([]*pipelines.Pipeline{p}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Close() })
	job, err := env.Build(p, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- job.Run(context.Background()) }()
	return env, job, func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			job.Stop()
			return fmt.Errorf("job %s did not end", p.Spec.Job.Name)
		}
	}
}

func scan(t *testing.T, env *build.Env, table string) map[string]aggmerge.Row {
	t.Helper()
	tab, ok := env.Table(table)
	if !ok {
		t.Fatalf("no table %s", table)
	}
	rows := map[string]aggmerge.Row{}
	err := tab.Scan(func(r aggmerge.Row) error {
		rows[r.Key[0].Str()] = aggmerge.Row{Key: append([]agg.Value(nil), r.Key...), Values: append([]agg.Value(nil), r.Values...)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestRevenue produces orders (some unpaid, some not JSON) into a topic and
// checks revenue per region once the job caught up.
func TestRevenue(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 2)
	p := load(t, "revenue/job.yaml", "source.kafka.brokers=["+strings.Join(brokers, ",")+"]", "source.kafka.topics=["+topic+"]")
	type total struct {
		revenue, orders, largest int64
		big                      bool
	}
	want := map[string]*total{}
	rng := rand.New(rand.NewSource(5))
	var recs []*kgo.Record
	for i := range 3000 {
		region := []string{"eu", "us", "asia", "africa"}[rng.Intn(4)]
		amount := math.Round(rng.Float64()*20000) / 100
		status := []string{"PAID", "PAID", "PAID", "REFUNDED"}[rng.Intn(4)]
		v, _ := json.Marshal(map[string]any{"order_id": i, "region": region, "amount": amount, "status": status})
		if i%500 == 7 {
			v = []byte("not json") // skipped by on_error: skip
		} else if status == "PAID" && amount > 0 {
			w := want[region]
			if w == nil {
				w = &total{}
				want[region] = w
			}
			cents := int64(amount * 100)
			w.revenue += cents
			w.orders++
			w.largest = max(w.largest, cents)
			w.big = w.big || amount >= 100
		}
		recs = append(recs, &kgo.Record{Topic: topic, Value: v})
	}
	kafkatest.Produce(t, brokers, recs...)
	env, job, wait := start(t, p)
	check := func() string {
		got := scan(t, env, "revenue_by_region")
		if len(got) != len(want) {
			return fmt.Sprintf("%d regions, want %d", len(got), len(want))
		}
		for region, w := range want {
			v := got[region].Values
			have := total{v[0].Int(), v[1].Int(), v[2].Int(), v[3].Bool()}
			if have != *w {
				return fmt.Sprintf("region %s: %+v, want %+v", region, have, *w)
			}
		}
		return ""
	}
	deadline := time.Now().Add(60 * time.Second)
	for check() != "" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	job.Stop()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if d := check(); d != "" {
		t.Fatal(d)
	}
}

// TestVisitors runs a bounded generator and checks exact (rbm32) and
// approximate (hll, within 3%) distinct visitors per page.
func TestVisitors(t *testing.T) {
	const count = 30_000
	p := load(t, "visitors/job.yaml", fmt.Sprintf("source.datagen.count=%d", count), "source.datagen.rate=0")
	gen, err := p.NewGenerator(0)
	if err != nil {
		t.Fatal(err)
	}
	users, views := map[string]map[int64]bool{}, map[string]int64{}
	for n := range int64(count) {
		r := gen.Row(n)
		page := r[1].(string)
		if users[page] == nil {
			users[page] = map[int64]bool{}
		}
		users[page][r[0].(int64)] = true
		views[page]++
	}
	env, _, wait := start(t, p)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	got := scan(t, env, "page_visitors")
	if len(got) != len(users) {
		t.Fatalf("%d pages, want %d", len(got), len(users))
	}
	for page, u := range users {
		v := got[page].Values
		bm, err := agg.Bitmap32(v[0])
		if err != nil {
			t.Fatal(err)
		}
		est, err := agg.HLLEstimate(v[1])
		if err != nil {
			t.Fatal(err)
		}
		exact := uint64(len(u))
		if bm.GetCardinality() != exact || v[2].Int() != views[page] {
			t.Errorf("page %s: %d visitors, %d views; want %d, %d", page, bm.GetCardinality(), v[2].Int(), exact, views[page])
		}
		if math.Abs(float64(est)-float64(exact)) > 0.03*float64(exact) {
			t.Errorf("page %s: hll estimate %d, exact %d", page, est, exact)
		}
	}
}

// TestLatency runs a bounded generator and checks max and last latency per
// endpoint (one subtask: last follows the generator's order).
func TestLatency(t *testing.T) {
	const count = 20_000
	p := load(t, "latency/job.yaml", fmt.Sprintf("source.datagen.count=%d", count), "source.datagen.rate=0")
	gen, err := p.NewGenerator(0)
	if err != nil {
		t.Fatal(err)
	}
	type stat struct {
		max, last           float64
		seq, requests, errs int64
	}
	want := map[string]*stat{}
	for n := range int64(count) {
		r := gen.Row(n)
		ep, lat := r[1].(string), r[2].(float64)
		w := want[ep]
		if w == nil {
			w = &stat{}
			want[ep] = w
		}
		w.max, w.last, w.seq = max(w.max, lat), lat, r[0].(int64)
		w.requests++
		if r[3].(int64) >= 500 {
			w.errs++
		}
	}
	env, _, wait := start(t, p)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	got := scan(t, env, "endpoint_latency")
	if len(got) != len(want) {
		t.Fatalf("%d endpoints, want %d", len(got), len(want))
	}
	for ep, w := range want {
		v := got[ep].Values
		have := stat{v[0].Float(), v[1].Float(), v[2].Int(), v[3].Int(), v[4].Int()}
		if have != *w {
			t.Errorf("endpoint %s: %+v, want %+v", ep, have, *w)
		}
	}
}

// TestChained runs job A (chained/a.yaml: totals per user, changelog
// published), job B (chained/b.yaml: A's changelog aggregated per region,
// aligned on A's versions, changelog published) and job C (chained/c.yaml:
// B's changelog added up into a grand total, aligned on B's versions) in
// one environment, as "runner run -f a.yaml -f b.yaml -f c.yaml" does. It
// checks A against its generator, B against the exact aggregate of A's
// expected table and C against that of B's, in the tables and in a
// consistent snapshot of the three (what `runner snapshot` reads). A runs at parallelism 1 so that the last region of each user is the
// generator's.
func TestChained(t *testing.T) {
	const count = 3000
	a := load(t, "chained/a.yaml", "job.parallelism=1", fmt.Sprintf("source.datagen.count=%d", count), "source.datagen.rate=0",
		"source.datagen.kafka.brokers=[embedded]", "sink.table.changelog.brokers=[embedded]")
	b := load(t, "chained/b.yaml", "source.kafka.brokers=[embedded]", "sink.table.changelog.brokers=[embedded]")
	c := load(t, "chained/c.yaml", "source.kafka.brokers=[embedded]", "sink.table.changelog.brokers=[embedded]")
	gen, err := a.NewGenerator(0)
	if err != nil {
		t.Fatal(err)
	}
	type user struct {
		total, orders int64
		region        string
	}
	users := map[string]user{}
	for n := range int64(count) {
		r := gen.Row(n)
		u := users[r[1].(string)]
		u.total += r[3].(int64)
		u.orders++
		u.region = r[2].(string)
		users[r[1].(string)] = u
	}
	type region struct{ total, users int64 }
	regions := map[string]region{}
	for _, u := range users {
		g := regions[u.region]
		g.total += u.total
		g.users++
		regions[u.region] = g
	}
	type grand struct{ total, users int64 }
	var all grand
	for _, g := range regions {
		all = grand{all.total + g.total, all.users + g.users}
	}

	env := build.NewEnv(build.Options{DataDir: t.TempDir()})
	t.Cleanup(func() { _ = env.Close() })
	jobFiles := []*pipelines.Pipeline{a, b, c}
	if err := env.OpenTables(jobFiles); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	exported := make(chan error, 1)
	go func() { exported <- env.RunExporters(ctx) }()
	defer func() {
		cancel()
		if err := <-exported; err != nil {
			t.Error(err)
		}
	}()
	done := make(chan error, len(jobFiles))
	var jobs []*build.Job
	for _, p := range jobFiles {
		j, err := env.Build(p, runtime.RestoreLatest)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
		go func() { done <- j.Run(ctx) }()
	}
	// check compares the three tables' rows (by their key's first column)
	// with the expected ones.
	check := func(a, b, c map[string][]agg.Value) string {
		if len(a) != len(users) {
			return fmt.Sprintf("%d users, want %d", len(a), len(users))
		}
		for name, v := range a {
			if have := (user{v[0].Int(), v[1].Int(), v[2].Str()}); have != users[name] {
				return fmt.Sprintf("user %s: %+v, want %+v", name, have, users[name])
			}
		}
		if len(b) != len(regions) {
			return fmt.Sprintf("%d regions, want %d", len(b), len(regions))
		}
		for name, w := range regions {
			if v := b[name]; len(v) != 2 || (region{v[0].Int(), v[1].Int()}) != w {
				return fmt.Sprintf("region %s: %v, want %+v", name, v, w)
			}
		}
		if v := c["all"]; len(c) != 1 || len(v) != 2 || (grand{v[0].Int(), v[1].Int()}) != all {
			return fmt.Sprintf("grand total %v, want %+v", c, all)
		}
		return ""
	}
	values := func(table string) map[string][]agg.Value {
		out := map[string][]agg.Value{}
		for k, r := range scan(t, env, table) {
			out[k] = r.Values
		}
		return out
	}
	tables := func() string { return check(values("user_totals"), values("region_stats"), values("grand_total")) }
	deadline := time.Now().Add(60 * time.Second)
	for tables() != "" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if d := tables(); d != "" {
		t.Fatal(d)
	}
	// The consistent snapshot reaches the same rows once C's version that
	// holds them is published.
	names := []string{"user_totals", "region_stats", "grand_total"}
	var d string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s, err := env.Snapshot(ctx, names, false)
		if err == nil {
			d = check(snapshotValues(t, s.Tables[0], "user", "total", "orders", "region"),
				snapshotValues(t, s.Tables[1], "region", "total", "users"), snapshotValues(t, s.Tables[2], "scope", "total", "users"))
			if d == "" {
				break
			}
		} else if d = err.Error(); !errors.Is(err, export.ErrInconsistent) && !strings.Contains(d, "no versions yet") {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no consistent snapshot of the whole input after 60 s: %s", d)
		}
	}
	for _, j := range jobs {
		j.Stop()
	}
	for range jobs {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// snapshotValues returns the rows of a table in a snapshot as scan does:
// the value of column key → the values of cols.
func snapshotValues(t *testing.T, ts export.TableSnapshot, key string, cols ...string) map[string][]agg.Value {
	t.Helper()
	out := map[string][]agg.Value{}
	rows, err := ts.Rows.Map()
	if err != nil {
		t.Fatalf("%s: %v", ts.Topic, err)
	}
	for _, r := range rows {
		m := r.Map()
		var vs []agg.Value
		for _, col := range cols {
			switch v := m[col].(type) {
			case int64:
				vs = append(vs, agg.IntValue(v))
			case string:
				vs = append(vs, agg.StringValue(v))
			default:
				t.Fatalf("%s: row %s: column %s is %T", ts.Topic, r, col, v)
			}
		}
		out[fmt.Sprint(m[key])] = vs
	}
	return out
}

// TestWindowed produces timestamped orders, out of order, some of them
// twice, into a topic and reads it to the end (bounded): one row per region
// and minute of event time, with the exact revenue and count, each order
// counted once; as the file is (emit: updates) and with emit: final and 10s
// of allowed lateness (the orders up to 9s behind their partition count;
// the end of the input closes every window, each written once: one +I per
// window in the table's log).
func TestWindowed(t *testing.T) {
	for _, final := range []bool{false, true} {
		t.Run(fmt.Sprintf("final=%v", final), func(t *testing.T) { testWindowed(t, final) })
	}
}

func testWindowed(t *testing.T, final bool) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	sets := []string{"source.kafka.brokers=[" + strings.Join(brokers, ",") + "]", "source.kafka.topics=[" + topic + "]",
		"source.kafka.bounded=true"}
	if final {
		sets = append(sets, "sink.table.window.emit=final", "sink.table.window.allowed_lateness=10s")
	}
	p := load(t, "windowed/job.yaml", sets...)
	type window struct {
		region string
		start  time.Time
	}
	type total struct{ cents, orders int64 }
	want := map[window]total{}
	rng := rand.New(rand.NewSource(7))
	base := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	for i := range 2000 {
		region := []string{"eu", "us", "asia"}[rng.Intn(3)]
		amount := float64(rng.Intn(10000)) / 100
		cents := int64(amount * 100) // as the job's int(amount * 100)
		at := base.Add(time.Duration(i)*100*time.Millisecond - time.Duration(rng.Intn(10))*time.Second)
		v, _ := json.Marshal(map[string]any{"order_id": i, "region": region, "amount": amount, "at": at.Format(time.RFC3339Nano)})
		w := window{region, at.Truncate(time.Minute)}
		tot := want[w]
		want[w] = total{tot.cents + cents, tot.orders + 1}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 3), Value: v})
		if rng.Intn(10) == 0 { // sent again: the dedupe step drops it
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 3), Value: v})
		}
	}
	kafkatest.Produce(t, brokers, recs...)
	env, _, wait := start(t, p)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	tab, _ := env.Table("orders_per_minute")
	got := map[window]total{}
	if err := tab.Scan(func(r aggmerge.Row) error {
		start, end := r.Key[1].Time(), r.Key[2].Time()
		if end.Sub(start) != time.Minute {
			return fmt.Errorf("window [%s, %s) is not a minute", start, end)
		}
		got[window{r.Key[0].Str(), start}] = total{r.Values[0].Int(), r.Values[1].Int()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table %v\nwant %v", got, want)
	}
	if !final {
		return
	}
	inserts := 0
	for b := range tab.Schema().Buckets {
		start, _, err := tab.LogOffsets(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := tab.ReadLog(b, start, func(e *aggmerge.Entry) error {
			switch {
			case e.Key == nil: // a marker
			case e.Op != aggmerge.Insert:
				return fmt.Errorf("a %v entry in the log of a final table", e.Op)
			default:
				inserts++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if inserts > len(want) {
		t.Fatalf("%d inserts for %d windows", inserts, len(want))
	}
}
