package main

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
)

// TestAbuseScaleTwoRunners runs the orders job in scale mode in two runner
// processes (docs/SCALING.md), each with its own data directory and
// --set job.scale.instance, on one Kafka cluster, the table's changelog
// exported by both. Orders arrive before and while both run. Each
// runner's table holds only the buckets it owns, so no user is in both,
// and its table scan says which; together they equal the exact totals,
// last_value columns included (a user's orders keep their order through
// the repartition topic); and both took part. table scan --all, through
// either runner and, once both stopped, from the job file alone, reads
// the whole table from the changelog: the exact totals.
func TestAbuseScaleTwoRunners(t *testing.T) {
	seed, feed := seededOrders(t)
	brokers, topic := feed.brokers, feed.topic
	feed.produce(500)

	sc := newScaled(t, brokers, topic, nil)
	sc.args = append(sc.args, "--set", "sink.table.changelog={topic: "+kafkatest.TopicName(t, brokers)+"}")
	runners := []*child{sc.start(0), sc.start(1)}
	kafkatest.WaitGroupShared(t, brokers, sc.group, 2)
	for range 5 {
		feed.produce(100 + feed.rng.Intn(200))
	}

	sc.waitExact(runners, feed, seed)
	sc.checkOwnScans()
	// Each /readyz names the instance's buckets and its input partitions;
	// together they hold the input's three, each once.
	waitFor(t, runners[0], 60*time.Second, "/readyz of both runners to name all input partitions, each once", func() bool {
		seen := map[int32]int{}
		for i, dir := range sc.dirs {
			_, st := readyScale(t, dir)
			want := []int{i, i + 2, i + 4, i + 6}
			if st == nil || !slices.Equal(st.OwnedBuckets, want) || st.Buckets != 8 || st.Instance != i || !st.Stage1Healthy {
				t.Fatalf("/readyz of instance %d: scale %+v, want owned buckets %v of 8, stage 1 healthy", i, st, want)
			}
			for _, p := range st.InputPartitions[topic] {
				seen[p]++
			}
		}
		return len(seen) == 3 && seen[0] == 1 && seen[1] == 1 && seen[2] == 1
	})
	for i, dir := range sc.dirs {
		waitFor(t, runners[i], 60*time.Second, "table scan --all through runner "+strconv.Itoa(i)+" to give the exact totals", func() bool {
			return sc.scanAll(feed, "--data-dir", dir) == ""
		})
	}
	for _, dir := range sc.dirs {
		_, metrics := httpGet(t, "http://"+liveRunner(dir)+"/metrics")
		for _, want := range []string{`ebbflow_repartition_owned_partitions{job="` + sc.job + `"} 4`,
			`ebbflow_repartition_transactions_total{job="` + sc.job + `",result="committed"}`, `ebbflow_repartition_rows_sent_total{job="` + sc.job + `"}`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("%s: /metrics lacks %s", dir, want)
			}
		}
	}
	for _, c := range runners {
		stopGracefully(t, c)
	}
	sizes := sc.checkExact(feed, seed)
	if sizes[0] == 0 || sizes[1] == 0 {
		t.Fatalf("a runner holds no rows: %v", sizes)
	}
	sc.checkOwnScans()
	// No runner: the job file (with run's --set) names the changelog, its
	// brokers and the instances.
	offline := []string{"-f", "testdata/orders.yaml", "--set", fmt.Sprintf("job.scale={mode: kafka, instances: 2, repartition_topic: %s}", sc.repartition)}
	for i, a := range sc.args {
		if a == "--set" {
			offline = append(offline, a, sc.args[i+1])
		}
	}
	if d := sc.scanAll(feed, offline...); d != "" {
		t.Fatalf("seed %d: table scan --all from the job file, both runners stopped: %s", seed, d)
	}
	_, stderr, code := runCLIErr(t, nil, "table", "scan", "--all", "--data-dir", sc.dirs[0], "--table", "totals")
	if code != exitUsage || !strings.Contains(stderr, "give the job file") {
		t.Fatalf("table scan --all of a stopped instance without its job file: exit %d, want %d saying to give the job file:\n%s", code, exitUsage, stderr)
	}
}

// readyScale reads the runner's /readyz: its status code and what the
// scaled job's instance owns.
func readyScale(t *testing.T, dir string) (int, *scaleStatus) {
	t.Helper()
	code, body := httpGet(t, "http://"+liveRunner(dir)+"/readyz")
	var r struct{ Jobs []jobStatus }
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("/readyz: %v: %s", err, body)
	}
	return code, r.Jobs[0].Scale
}

// TestAbuseScaleBrokerOutage stops the Kafka broker under a scaled
// runner and starts it again: stage 1's failures (its poll, its commit)
// are retried with a backoff instead of ending the runner; meanwhile
// /readyz is 503 and names stage 1's failure, and /metrics counts it.
// After the broker is back the runner is ready again and its table holds
// the exact totals of the orders before and after the outage.
func TestAbuseScaleBrokerOutage(t *testing.T) {
	opts := embedded.Options{Port: kafkatest.FreePort(t), DataDir: t.TempDir()}
	b, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // after the topics' cleanups
	brokers := b.Addrs()
	topic := kafkatest.NewTopic(t, brokers, 3)
	feed := &orderFeed{t: t, brokers: brokers, topic: topic, rng: rand.New(rand.NewSource(3)), want: map[string]*userTotal{}}
	feed.produce(200)
	job, dir := uniqueJob(), t.TempDir()
	c := start(t, nil, slices.Concat(scaledArgs(brokers, topic, job), []string{"--data-dir", dir,
		"--set", "job.scale={mode: kafka, instances: 1, repartition_topic: " + kafkatest.TopicName(t, brokers) + "}"})...)
	exact := func() bool {
		return liveRunner(dir) != "" && equalTotals(scanJSON(t, dir, "totals", "user"), feed.want) == ""
	}
	waitFor(t, c, 60*time.Second, "the exact totals before the outage", exact)

	b.Close()
	waitFor(t, c, 60*time.Second, "/readyz to say stage 1 fails, and /metrics to count two failures", func() bool {
		if liveRunner(dir) == "" {
			return false // ended: waitFor says so
		}
		code, st := readyScale(t, dir)
		_, metrics := httpGet(t, "http://"+liveRunner(dir)+"/metrics")
		return code == http.StatusServiceUnavailable && st != nil && !st.Stage1Healthy && strings.Contains(st.Stage1Error, "retrying") &&
			metricAtLeast(metrics, `ebbflow_repartition_failures_total{job="`+job+`"}`, 2)
	})
	select {
	case <-c.done:
		t.Fatalf("the runner ended during the outage: %v; log:\n%s", c.err, c.stderr.String())
	default:
	}
	if b, err = embedded.Start(opts); err != nil {
		t.Fatalf("restart the broker: %v", err)
	}
	feed.produce(200)
	waitFor(t, c, 120*time.Second, "the exact totals after the outage", exact)
	waitFor(t, c, 60*time.Second, "/readyz to be ready again", func() bool {
		code, st := readyScale(t, dir)
		return code == http.StatusOK && st != nil && st.Stage1Healthy
	})
	stopGracefully(t, c)
}

// metricAtLeast reports whether the exposition text has the sample
// series with a value of at least min.
func metricAtLeast(text, series string, min float64) bool {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return err == nil && f >= min
		}
	}
	return false
}

// checkOwnScans checks that each runner's table scan (through the runner
// while it runs, from its files once stopped) shows only its buckets, and
// says which: instance i holds the buckets b with b mod 2 = i of 8.
func (sc *scaled) checkOwnScans() {
	sc.t.Helper()
	for i, dir := range sc.dirs {
		out, stderr, code := runCLIErr(sc.t, nil, "table", "scan", "--data-dir", dir, "--table", "totals", "-o", "json")
		buckets := map[int]string{0: "0, 2, 4, 6", 1: "1, 3, 5, 7"}[i]
		want := fmt.Sprintf("holds only the buckets of instance %d of 2 of the scaled job %q: 4 of 8 buckets (%s)", i, sc.job, buckets)
		if code != 0 || !strings.Contains(stderr, want) {
			sc.t.Fatalf("table scan of instance %d: exit %d, stderr does not say %q:\n%s", i, code, want, stderr)
		}
		if len(jsonRows(sc.t, out, "user")) == 0 {
			sc.t.Fatalf("table scan of instance %d: no rows", i)
		}
	}
}

// scanAll runs table scan --all with args and says how its rows differ
// from the exact totals ("" when they equal them).
func (sc *scaled) scanAll(feed *orderFeed, args ...string) string {
	out, stderr, code := runCLIErr(sc.t, nil, slices.Concat([]string{"table", "scan", "--all", "--table", "totals", "-o", "json"}, args)...)
	if code != 0 {
		return fmt.Sprintf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "whole, every instance's buckets, from its changelog") {
		return "it does not say it read the whole table: " + stderr
	}
	return equalTotals(jsonRows(sc.t, out, "user"), feed.want)
}

// TestAbuseScaleSIGKILL kills one of the two runners of a scaled job with
// SIGKILL at seeded random moments while orders keep arriving, and
// restarts it on its data directory: stage 1's open transaction is fenced
// by the restart (same transactional id, same static group member), stage
// 2 undoes past its checkpoint and replays the repartition topic from
// it. At the end the two tables together equal the exact totals.
func TestAbuseScaleSIGKILL(t *testing.T) {
	seed, feed := seededOrders(t)
	brokers, topic := feed.brokers, feed.topic
	feed.produce(300)
	sc := newScaled(t, brokers, topic, []string{syncWritesEnv + "=1"})
	runners := []*child{sc.start(0), sc.start(1)}
	kafkatest.WaitGroupShared(t, brokers, sc.group, 2)
	// At least -kills kills, and more (up to four times as many) until an
	// undo restored a key: a kill may land where stage 2 had written
	// nothing past its checkpoint (on Kafka, rows arrive in bursts at the
	// commits of stage 1).
	undone := 0
	for k := 0; k < *killsFlag || undone == 0 && k < 4**killsFlag; k++ {
		undone += sc.kill(runners, feed, k)
	}
	feed.produce(500)
	sc.waitExact(runners, feed, seed)
	for _, c := range runners {
		stopGracefully(t, c)
		undone += undoneKeys(c)
	}
	sc.checkExact(feed, seed)
	t.Logf("seed %d: %d orders; undo restored %d keys over the runs", seed, feed.seq, undone)
	if undone == 0 {
		t.Fatalf("seed %d: %d kills, and no undo restored a key: the kills left nothing past the checkpoints, so the test proved little", seed, 4**killsFlag)
	}
}

// TestAbuseScaleSIGKILLBites runs TestAbuseScaleSIGKILL with runners whose
// stage 2 skips undo (at-least-once): the replay of the repartition topic
// from the checkpoint then counts again what the killed run had written
// past it, and the check of the totals must find the tables wrong, or it
// proves nothing.
func TestAbuseScaleSIGKILLBites(t *testing.T) {
	seed, feed := seededOrders(t)
	feed.produce(300)
	sc := newScaled(t, feed.brokers, feed.topic, []string{syncWritesEnv + "=1", skipUndoEnv + "=1"})
	runners := []*child{sc.start(0), sc.start(1)}
	kafkatest.WaitGroupShared(t, feed.brokers, sc.group, 2)
	// A kill may land where stage 2 wrote nothing past its checkpoint, and
	// then costs nothing to skip undo: kill in rounds of 4 until the tables
	// go wrong (they stay wrong), at most 3 rounds.
	d, kills := "", 0
	for round := 0; round < 3 && d == ""; round++ {
		for range 4 {
			sc.kill(runners, feed, kills)
			kills++
		}
		feed.produce(100)
		for _, c := range runners { // every order counted at least once
			waitFor(t, c, 60*time.Second, fmt.Sprintf("every order counted (seed %d)", seed), func() bool {
				return sc.serving() && sc.counted() >= feed.paid()
			})
		}
		d = sc.diff(feed)
	}
	if d == "" { // the last look, once stopped
		for _, c := range runners {
			stopGracefully(t, c)
		}
		d = sc.diff(feed)
	}
	if d == "" {
		t.Fatalf("seed %d: stage 2 skipped undo after %d kills, and the tables still look exact: the check cannot fail", seed, kills)
	}
	t.Logf("seed %d: detected, as it must be: %s", seed, d)
}

// kill waits a seeded random while (orders arriving), kills one of the
// runners, chosen at random, with SIGKILL, restarts it on its data
// directory and returns how many keys the killed run's undo had restored
// at its start.
func (sc *scaled) kill(runners []*child, feed *orderFeed, k int) int {
	i := feed.rng.Intn(len(runners))
	wait := time.Duration(300+feed.rng.Intn(1500)) * time.Millisecond
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		feed.produce(20 + feed.rng.Intn(80))
		time.Sleep(time.Duration(5+feed.rng.Intn(20)) * time.Millisecond) // the pace of the input
	}
	if err := runners[i].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		sc.t.Fatal(err)
	}
	runners[i].exitCode(sc.t, 30*time.Second)
	undone := undoneKeys(runners[i])
	sc.t.Logf("kill %d: instance %d after %s (its undo at that run's start restored %d keys)", k+1, i, wait, undone)
	runners[i] = sc.start(i)
	return undone
}

// counted is the orders the two tables count together.
func (sc *scaled) counted() int64 {
	got, _, _ := sc.union()
	var n int64
	for _, r := range got {
		c, _ := strconv.ParseInt(fmt.Sprint(r["orders"]), 10, 64)
		n += c
	}
	return n
}

// scaled is the orders job in scale mode over two runners, each with its
// data directory.
type scaled struct {
	t           *testing.T
	job, group  string // the job's name, stage 1's consumer group
	env, args   []string
	dirs        []string
	repartition string
}

func newScaled(t *testing.T, brokers []string, topic string, env []string) *scaled {
	job := uniqueJob()
	return &scaled{t: t, env: env, dirs: []string{t.TempDir(), t.TempDir()}, repartition: kafkatest.TopicName(t, brokers),
		job: job, group: job + ".scale", args: scaledArgs(brokers, topic, job)}
}

// uniqueJob names the orders job uniquely: its group, static members and
// transactional ids live on the cluster beyond the test (a static member
// that stopped holds its partitions for the session timeout).
func uniqueJob() string { return fmt.Sprintf("orders-%d", time.Now().UnixNano()) }

// scaledArgs runs the orders job as job on topic, without job.scale.
func scaledArgs(brokers []string, topic, job string) []string {
	return []string{"run", "-f", "testdata/orders.yaml", "--http-address", "127.0.0.1:0", "--summary", "0", "--set", "job.name=" + job,
		"--set", "source.kafka.brokers=[" + strings.Join(brokers, ",") + "]", "--set", "source.kafka.topics=[" + topic + "]"}
}

// start runs instance i in its data directory.
func (sc *scaled) start(i int) *child { return sc.startIn(i, sc.dirs[i]) }

// startIn runs instance i in data directory dir.
func (sc *scaled) startIn(i int, dir string) *child {
	return start(sc.t, sc.env, slices.Concat(sc.args, []string{"--data-dir", dir,
		"--set", fmt.Sprintf("job.scale={mode: kafka, instances: 2, instance: %d, repartition_topic: %s}", i, sc.repartition)})...)
}

// union scans both tables: the rows by user, how many each holds, and
// which users are in both.
func (sc *scaled) union() (map[string]map[string]any, []int, []string) {
	all := map[string]map[string]any{}
	var sizes []int
	var dup []string
	for _, dir := range sc.dirs {
		rows := scanJSON(sc.t, dir, "totals", "user")
		sizes = append(sizes, len(rows))
		for u, r := range rows {
			if _, ok := all[u]; ok {
				dup = append(dup, u)
			}
			all[u] = r
		}
	}
	return all, sizes, dup
}

// diff describes how the two tables differ from the exact totals.
func (sc *scaled) diff(feed *orderFeed) string {
	got, _, dup := sc.union()
	if len(dup) > 0 {
		return fmt.Sprintf("users in both tables: %v", dup)
	}
	return equalTotals(got, feed.want)
}

// waitExact waits until both runners serve and their tables together hold
// the exact totals.
func (sc *scaled) waitExact(runners []*child, feed *orderFeed, seed int64) {
	for _, c := range runners {
		waitFor(sc.t, c, 60*time.Second, "the exact totals over both runners (seed "+strconv.FormatInt(seed, 10)+")", func() bool {
			return sc.serving() && sc.diff(feed) == ""
		})
	}
}

// serving reports whether every runner serves its table over HTTP: a
// table scan of a data directory whose runner is starting fails (the
// directory is locked, with no address to ask yet).
func (sc *scaled) serving() bool {
	for _, dir := range sc.dirs {
		if liveRunner(dir) == "" {
			return false
		}
	}
	return true
}

// checkExact fails unless the stopped runners' tables together hold the
// exact totals, and returns how many rows each holds.
func (sc *scaled) checkExact(feed *orderFeed, seed int64) []int {
	if d := sc.diff(feed); d != "" {
		sc.t.Fatalf("seed %d: after the stop: %s", seed, d)
	}
	got, sizes, _ := sc.union()
	sc.t.Logf("seed %d: %d orders, %d users: instance 0 holds %d, instance 1 holds %d", seed, feed.seq, len(got), sizes[0], sizes[1])
	return sizes
}

// TestAbuseScaleBadRecord: a record that stage 1 of a scaled job cannot
// decode ends the runner with exit 1 and a message naming the record
// (on_error: fail), and its group offsets do not pass it: nothing after
// the last commit is lost.
func TestAbuseScaleBadRecord(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	kafkatest.Produce(t, brokers, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(`{"seq": 1, "user": "u1", "amount": 5, "status": "PAID"}`)},
		&kgo.Record{Topic: topic, Partition: 0, Value: []byte(`not json`)})
	job := uniqueJob()
	c := start(t, nil, slices.Concat(scaledArgs(brokers, topic, job), []string{"--data-dir", t.TempDir(),
		"--set", "job.scale={mode: kafka, instances: 1, repartition_topic: " + kafkatest.TopicName(t, brokers) + "}"})...)
	if code := c.exitCode(t, 60*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1; log:\n%s", code, c.stderr.String())
	}
	if want := topic + "/0@1"; !strings.Contains(c.stderr.String(), want) {
		t.Fatalf("the error does not name the record %s:\n%s", want, c.stderr.String())
	}
	offsets, err := kafkatest.Admin(t, brokers).FetchOffsets(t.Context(), job+".scale")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offsets.Lookup(topic, 0); ok && o.At > 1 {
		t.Fatalf("the group's offset passed the bad record: %d", o.At)
	}
}

// TestAbuseScaleLayoutChange: a data directory records which instance of
// a scaled job it holds, and a run that would apply other buckets to its
// table is refused with exit 3, naming both layouts, and changes nothing:
// another instance count or number, the job without job.scale, and a
// scaled instance on the checkpoints of a single-process run. The run as
// before still works.
func TestAbuseScaleLayoutChange(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	(&orderFeed{t: t, brokers: brokers, topic: topic, rng: rand.New(rand.NewSource(1)), want: map[string]*userTotal{}}).produce(50)
	job := uniqueJob()
	repartition := kafkatest.TopicName(t, brokers)
	scaleArg := func(instance, instances int) []string {
		return []string{"--set", fmt.Sprintf("job.scale={mode: kafka, instances: %d, instance: %d, repartition_topic: %s}", instances, instance, repartition)}
	}
	run := func(dir string, extra ...string) *child {
		return start(t, nil, slices.Concat(scaledArgs(brokers, topic, job), []string{"--data-dir", dir}, extra)...)
	}
	runAndStop := func(dir string, extra ...string) {
		c := run(dir, extra...)
		waitFor(t, c, 60*time.Second, "the runner to serve", func() bool { return liveRunner(dir) != "" })
		stopGracefully(t, c)
	}
	refused := func(dir string, want []string, extra ...string) {
		t.Helper()
		c := run(dir, extra...)
		if code := c.exitCode(t, 60*time.Second); code != 3 {
			t.Fatalf("exit %d, want 3; log:\n%s", code, c.stderr.String())
		}
		for _, w := range want {
			if !strings.Contains(c.stderr.String(), w) {
				t.Fatalf("the error does not say %q:\n%s", w, c.stderr.String())
			}
		}
	}

	scaled := t.TempDir()
	runAndStop(scaled, scaleArg(0, 2)...)
	refused(scaled, []string{"holds instance 0 of 2", "asks for instance 0 of 3", "needs failover"}, scaleArg(0, 3)...)
	refused(scaled, []string{"holds instance 0 of 2", "asks for instance 1 of 2"}, scaleArg(1, 2)...)
	refused(scaled, []string{"holds instance 0 of 2", "without job.scale"})
	runAndStop(scaled, scaleArg(0, 2)...)

	single := t.TempDir()
	runAndStop(single)
	refused(single, []string{"checkpoints of a run without job.scale"}, scaleArg(0, 2)...)
	runAndStop(single)
}

// TestAbuseScaleSameInstanceTwice: a second runner started as an
// instance that already runs (same job, same instance, another data
// directory) fences the first through the transactional id: the first
// stops with exit 1, saying why, instead of applying beside it.
func TestAbuseScaleSameInstanceTwice(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	feed := &orderFeed{t: t, brokers: brokers, topic: topic, rng: rand.New(rand.NewSource(2)), want: map[string]*userTotal{}}
	feed.produce(100)
	sc := newScaled(t, brokers, topic, nil)
	first := sc.start(0)
	waitFor(t, first, 60*time.Second, "the first runner to serve", func() bool { return liveRunner(sc.dirs[0]) != "" })
	second := sc.startIn(0, t.TempDir()) // instance 0 again, in another data directory
	feed.produce(100)
	if code := first.exitCode(t, 60*time.Second); code != 1 {
		t.Fatalf("the first runner: exit %d, want 1; log:\n%s", code, first.stderr.String())
	}
	if want := "a newer incarnation of this instance"; !strings.Contains(first.stderr.String(), want) {
		t.Fatalf("the first runner does not say %q:\n%s", want, first.stderr.String())
	}
	stopGracefully(t, second)
}

// paid is the orders the exact totals count.
func (f *orderFeed) paid() int64 {
	var n int64
	for _, w := range f.want {
		n += w.orders
	}
	return n
}
