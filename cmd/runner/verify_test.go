package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// verifyJob is the job file of the verify tests: the quickstart (orders
// generated into a topic, read back, paid ones summed per region, with a
// changelog), with a bounded generator. With EBBFLOW_KAFKA_BROKERS set the
// orders and the changelog go to that broker, on topics of this test;
// else to the embedded one.
type verifyJob struct {
	file      []string                  // the flags that give the job
	want      map[string]map[string]any // quickstartOracle's rows
	changelog string                    // the changelog topic
	topics    []string                  // on a real broker: the test's topics
}

func newVerifyJob(t *testing.T, count, rate int) verifyJob {
	t.Helper()
	sets := []string{fmt.Sprintf("source.datagen.count=%d", count), fmt.Sprintf("source.datagen.rate=%d", rate)}
	j := verifyJob{changelog: "revenue-changelog"}
	if brokers := kafkatest.RealBrokers(); len(brokers) > 0 {
		list := "[" + strings.Join(brokers, ",") + "]"
		j.changelog = kafkatest.TopicName(t, brokers)
		orders := kafkatest.TopicName(t, brokers)
		j.topics = []string{orders, j.changelog}
		sets = append(sets, "source.datagen.kafka.brokers="+list, "source.datagen.topic="+orders,
			"sink.table.changelog.brokers="+list, "sink.table.changelog.topic="+j.changelog)
	}
	j.want, _ = quickstartOracle(t, sets, int64(count))
	j.file = []string{"-f", quickstart}
	for _, s := range sets {
		j.file = append(j.file, "--set", s)
	}
	return j
}

// chaosSeed returns -seed, else one from the clock, for verify --chaos
// (which prints it), and deletes at the end of the test the topics that
// the chaos runs use on a real broker instead of the job's.
func (j verifyJob) chaosSeed(t *testing.T) string {
	seed := fmt.Sprint(time.Now().UnixNano())
	if *seedFlag != 0 {
		seed = fmt.Sprint(*seedFlag)
	}
	if len(j.topics) == 0 {
		return seed
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
		defer cancel()
		var names []string
		for _, topic := range j.topics {
			names = append(names, topic+"-verify-"+seed)
		}
		_, _ = kafkatest.Admin(t, kafkatest.RealBrokers()).DeleteTopics(ctx, names...)
	})
	return seed
}

// runVerify runs runner verify and returns its output and exit code.
func runVerify(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	out, stderr, code := runCLIErr(t, env, append([]string{"verify"}, args...)...)
	t.Logf("runner verify: exit %d\n%s%s", code, out, stderr)
	return out + stderr, code
}

// TestVerify runs the quickstart to the end of its bounded input, stops
// it, and verifies it: equal (exit 0), saying what it compared. Then it
// publishes one changelog record again (a duplicate, which leaves the
// replayed rows as they were) and overwrites one value of the table (as
// another writer could): verify fails each time (exit 4), naming the
// partition of the duplicate, and the key, column and values of the
// damaged row.
func TestVerify(t *testing.T) {
	dir := t.TempDir()
	j := newVerifyJob(t, 600, 2000)
	file, want := j.file, j.want
	c := start(t, nil, append([]string{"run", "--data-dir", dir, "--http-address", "127.0.0.1:0", "--summary", "0"}, file...)...)
	waitFor(t, c, 60*time.Second, "every paid order in the table", func() bool {
		return liveRunner(dir) != "" && totalOrders(scanJSON(t, dir, "revenue", "region")) == totalOrders(want)
	})
	// A running job is refused: its table moves on past the checkpoint.
	if out, code := runVerify(t, nil, append([]string{"--data-dir", dir}, file...)...); code != exitUsage ||
		!strings.Contains(out, "stop it first") {
		t.Fatalf("verify of a running job: exit %d, want %d", code, exitUsage)
	}
	stopGracefully(t, c)
	args := append([]string{"--data-dir", dir}, file...)
	out, code := runVerify(t, nil, args...)
	if code != 0 {
		t.Fatalf("verify of a correct run: exit %d, want 0", code)
	}
	for _, s := range []string{"against checkpoint", "final)", "up to offsets 0:", "600 records", "table: equal (3 keys)", "changelog: equal (3 keys)", "verify: equal"} {
		if !strings.Contains(out, s) {
			t.Errorf("verify output does not say %q", s)
		}
	}

	duplicateChangelogRecord(t, dir, j.changelog)
	out, code = runVerify(t, nil, args...)
	if code != exitDiffer || !strings.Contains(out, "table: equal") || !strings.Contains(out, "changelog: DIFFERENT") ||
		!strings.Contains(out, "a change published twice") {
		t.Fatalf("verify after a duplicate changelog record: exit %d, want %d and the duplicate named", code, exitDiffer)
	}

	damaged := overwriteOrders(t, dir, "eu", 1)
	out, code = runVerify(t, nil, args...)
	wantLine := fmt.Sprintf(`  orders: expected %v, table 1, changelog %v`, want["eu"]["orders"], want["eu"]["orders"])
	if code != exitDiffer || !strings.Contains(out, "table: DIFFERENT: 1 keys with wrong values") ||
		!strings.Contains(out, `key {"region":"eu"}:`) || !strings.Contains(out, wantLine) {
		t.Fatalf("verify of a damaged table (%s): exit %d, want %d and %q", damaged, code, exitDiffer, wantLine)
	}
}

// duplicateChangelogRecord produces the last record of a partition of the
// changelog again, headers and all, outside any transaction.
func duplicateChangelogRecord(t *testing.T, dir, topic string) {
	t.Helper()
	brokers := kafkatest.RealBrokers()
	if len(brokers) == 0 {
		found, closeBroker, err := embeddedBrokers(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer closeBroker()
		brokers = found
	}
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	fs := cl.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	recs := fs.Records()
	if len(recs) == 0 {
		t.Fatal("no changelog record")
	}
	r := recs[len(recs)-1]
	dup := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers}
	p := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer p.Close()
	if err := p.ProduceSync(ctx, dup).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// overwriteOrders sets the orders of a region's row to n, as a writer of
// another name would: an ordinary write with its log entry, which the
// job's undo never takes back.
func overwriteOrders(t *testing.T, dir, region string, n int64) string {
	t.Helper()
	tb, err := aggmerge.Open(build.TableDir(dir, "revenue"), aggmerge.Schema{}, aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	epoch, err := tb.Register("quickstart", "vandal", []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tb.NewBatch(aggmerge.Writer{ID: "vandal", Epoch: epoch}, []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Upsert(aggmerge.Overwrite, []agg.Value{agg.StringValue(region)}, []agg.Value{agg.IntValue(n)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Apply(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("orders of %s set to %d", region, n)
}

// TestVerifyChaos runs verify --chaos 3 on the quickstart: three runs
// killed with SIGKILL at seeded moments while orders stream in, a fourth
// stopped gracefully, then the verification of the fresh data directory:
// equal, exit 0, the seed printed. The runners sync their table writes, so
// that the kills leave writes past the last checkpoint for undo to take
// back (TestVerifyChaosCatchesDoubleCounting: the same run without undo
// fails).
func TestVerifyChaos(t *testing.T) {
	j := newVerifyJob(t, 20000, 4000)
	out, code := runVerify(t, []string{syncWritesEnv + "=1"}, append([]string{"--chaos", "3", "--seed", j.chaosSeed(t), "--kill-within", "1500ms", "--settle", "1s",
		"--data-dir", t.TempDir()}, j.file...)...)
	if code != 0 {
		t.Fatalf("verify --chaos 3: exit %d, want 0", code)
	}
	for _, s := range []string{"chaos: seed ", "run 3 killed (SIGKILL)", "run 4 stopped with a final checkpoint", "table: equal", "changelog: equal", "verify: equal"} {
		if !strings.Contains(out, s) {
			t.Errorf("verify --chaos output does not say %q", s)
		}
	}
}

// TestVerifyChaosCatchesDoubleCounting is verify --chaos against runners
// that keep their table writes past the last checkpoint (synced) and skip
// the undo that should take them back: the input replayed after each kill
// counts twice, and verify must say so (exit 4), naming a key. The kills
// fall after 500 ms, when the job is writing: a kill during start-up
// leaves nothing to count twice (CI once drew 10, 147 and 132 ms, and
// verify rightly found the table equal).
func TestVerifyChaosCatchesDoubleCounting(t *testing.T) {
	j := newVerifyJob(t, 30000, 3000)
	out, code := runVerify(t, []string{syncWritesEnv + "=1", skipUndoEnv + "=1"}, append([]string{"--chaos", "3", "--seed", j.chaosSeed(t),
		"--kill-after", "500ms", "--kill-within", "1500ms", "--settle", "500ms", "--data-dir", t.TempDir()}, j.file...)...)
	if code != exitDiffer || !strings.Contains(out, "table: DIFFERENT") || !strings.Contains(out, `key {"region":`) {
		t.Fatalf("verify --chaos of runners without undo: exit %d, want %d and a key named", code, exitDiffer)
	}
}

// TestVerifyKilledJob kills a runner (SIGKILL, table writes synced) while
// orders stream in, once the table shows orders written after its latest
// checkpoint: its table then holds writes past that checkpoint, which
// verify refuses to compare (exit 1, saying what to do); run again and
// stopped, the job verifies equal. A kill that still lands right after a
// checkpoint leaves nothing past it, and verify finds the table equal
// (exit 0): then the job runs and is killed again, up to 5 times.
func TestVerifyKilledJob(t *testing.T) {
	dir := t.TempDir()
	j := newVerifyJob(t, 60000, 3000)
	run := append([]string{"run", "--data-dir", dir, "--http-address", "127.0.0.1:0", "--summary", "0"}, j.file...)
	args := append([]string{"--data-dir", dir}, j.file...)
	latest := func() int64 {
		cps, _ := build.ListCheckpoints(dir, "quickstart")
		id := int64(-1)
		for _, c := range cps {
			if c.Completed {
				id = max(id, int64(c.ID))
			}
		}
		return id
	}
	refused := false
	for attempt := 1; attempt <= 5 && !refused; attempt++ {
		before := latest()
		c := start(t, []string{syncWritesEnv + "=1"}, run...)
		// the restore's checkpoint, then a periodic one: orders flow; then
		// more orders in the table than just after the latest checkpoint
		waitFor(t, c, 60*time.Second, "two checkpoints of this run", func() bool { return latest() >= before+2 && liveRunner(dir) != "" })
		total := func() string { return totalOrders(scanJSON(t, dir, "revenue", "region")) }
		id := latest()
		orders := total() // read after checkpoint id completed
		waitFor(t, c, 60*time.Second, "orders written past a checkpoint", func() bool {
			got := total()
			if now := latest(); now != id { // a newer one may cover got: start over from it
				id, orders = now, total()
				return false
			}
			return got != orders
		})
		if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		c.exitCode(t, 30*time.Second)
		out, code := runVerify(t, nil, args...)
		switch {
		case code == exitFailure && strings.Contains(out, "past its latest checkpoint") && strings.Contains(out, "run it again and stop it"):
			refused = true
		case code != 0:
			t.Fatalf("verify of a killed job: exit %d, want %d and what to do (or 0 when the kill left nothing past the checkpoint)", code, exitFailure)
		default:
			t.Logf("kill %d left nothing past the checkpoint: again", attempt)
		}
	}
	if !refused {
		t.Fatal("5 kills left nothing past their checkpoints")
	}
	c := start(t, nil, run...)
	waitFor(t, c, 60*time.Second, "the restarted job ready", func() bool { return liveRunner(dir) != "" })
	stopGracefully(t, c)
	if out, code := runVerify(t, nil, args...); code != 0 || !strings.Contains(out, "verify: equal") {
		t.Fatalf("verify of the job run again and stopped: exit %d, want 0", code)
	}
}

// TestVerifyUsage: what verify cannot check is bad usage (exit 2), said
// before anything is opened: no job file, a source that reads a changelog,
// one that does not start at the earliest offset, a generator of
// wall-clock times, a chaos schedule without kills or with its window
// reversed.
func TestVerifyUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dir", dir}, "verify needs the job file"},
		{[]string{"-f", "../../examples/chained/b.yaml", "--data-dir", dir}, "reads a changelog (format upsert-json): not supported offline"},
		{[]string{"-f", "testdata/orders.yaml", "--set", "source.kafka.start_offset=latest", "--data-dir", dir}, "it needs start_offset: earliest"},
		{[]string{"-f", quickstart, "--set", "source.datagen.topic=", "--set", "source.datagen.fields.at={now: true}", "--data-dir", dir},
			"field at is the wall-clock time"},
		{[]string{"--chaos", "0", "-f", quickstart}, "--chaos 0: want at least 1 kill"},
		{[]string{"--chaos", "1", "--kill-after", "2s", "--kill-within", "1s", "-f", quickstart}, "--kill-after 2s must be at least 0 and less than --kill-within 1s"},
	} {
		if out, code := runVerify(t, nil, c.args...); code != exitUsage || !strings.Contains(out, c.want) {
			t.Errorf("verify %v: exit %d, want %d and %q", c.args, code, exitUsage, c.want)
		}
	}
}

// TestVerifyChaosCopyInput runs verify --chaos 2 --copy-input on a job
// reading a Kafka topic of orders (three partitions): the
// topic is copied into one of the chaos run's own, the job runs on the
// copy under two SIGKILLs, and verify recomputes it from the copy: equal.
// A user's orders are spread over the partitions, so its last region and
// order are those of one of them (the interleaving is not defined).
func TestVerifyChaosCopyInput(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	const n = 3000
	recs := make([]*kgo.Record, n)
	for i := range recs {
		user := fmt.Sprintf("u%02d", i%37)
		status := []string{"PAID", "PAID", "PAID", "CANCELLED"}[i%4]
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % 3), Key: []byte(user), Value: fmt.Appendf(nil,
			`{"seq":%d,"user":%q,"region":%q,"amount":%d,"status":%q}`, i, user, []string{"eu", "us", "asia"}[i%3], 1+i%500, status)}
	}
	kafkatest.Produce(t, brokers, recs...)
	seed := fmt.Sprint(time.Now().UnixNano())
	if *seedFlag != 0 {
		seed = fmt.Sprint(*seedFlag)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
		defer cancel()
		_, _ = kafkatest.Admin(t, brokers).DeleteTopics(ctx, topic+"-verify-"+seed)
	})
	out, code := runVerify(t, []string{syncWritesEnv + "=1"}, "--chaos", "2", "--copy-input", "--seed", seed, "--kill-within", "800ms", "--settle", "1s",
		"--data-dir", t.TempDir(), "-f", "testdata/orders.yaml",
		"--set", "source.kafka.brokers=["+strings.Join(brokers, ",")+"]", "--set", "source.kafka.topics=["+topic+"]")
	if code != 0 {
		t.Fatalf("verify --chaos 2 --copy-input: exit %d, want 0", code)
	}
	for _, s := range []string{fmt.Sprintf("copied %d records of topic %q into %q", n, topic, topic+"-verify-"+seed),
		fmt.Sprintf("input: source \"kafka\" topic %q up to offsets", topic+"-verify-"+seed), "table: equal", `changelog: table "totals" publishes none`, "verify: equal"} {
		if !strings.Contains(out, s) {
			t.Errorf("verify --chaos --copy-input output does not say %q", s)
		}
	}
}

// TestVerifyDatagen verifies a job fed by a datagen directly (no topic),
// whose bounded input ends the job: verify makes the records again from the
// seed, as far as the checkpoint's lanes had come, and finds the table
// and the changelog equal.
func TestVerifyDatagen(t *testing.T) {
	dir := t.TempDir()
	file := []string{"-f", quickstart, "--set", "source.datagen.topic=", "--set", "source.datagen.count=1500", "--set", "source.datagen.rate=0",
		"--data-dir", dir}
	c := start(t, nil, append([]string{"run", "--http-address", "off", "--summary", "0"}, file...)...)
	if code := c.exitCode(t, 60*time.Second); code != 0 {
		t.Fatalf("run of a bounded datagen: exit %d; log:\n%s", code, c.stderr.String())
	}
	out, code := runVerify(t, nil, file...)
	if code != 0 {
		t.Fatalf("verify: exit %d, want 0", code)
	}
	for _, s := range []string{`input: source "datagen" (datagen) up to records 0/2:`, "input: 1500 records", "table: equal (3 keys)", "changelog: equal (3 keys)"} {
		if !strings.Contains(out, s) {
			t.Errorf("verify output does not say %q", s)
		}
	}
}
