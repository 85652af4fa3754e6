// Command peers runs the same exactly-once aggregation in ebbflow, Flink 2.2
// and Kafka Streams 4.4 on one real Kafka broker, side by side, and prints
// throughput, CPU per record and peak memory with ratios.
//
// The job: a topic preloaded with JSON records of ~100 B (a seeded generator;
// the record key is the user), per user the sum, count and max of amount,
// exactly once, checkpoints (commits) every second, parallelism 2. Every
// system reads the topic from the start and ends by itself: ebbflow with a
// bounded Kafka source, Flink with a bounded KafkaSource, Kafka Streams when
// its group has committed the end offsets. Each run is one child process
// timed from launch to exit; CPU and peak RSS are the child's own (for the
// JVMs their start-up is included, as it is for the runner). Every result is
// checked against the exact aggregates computed by the generator; a wrong
// result stops the benchmark. Rounds interleave the systems, so that a noisy
// moment of the machine touches all of them.
//
// Run it from the repository root with the broker of .ci/kafka.sh:
//
//	./.ci/kafka.sh start
//	go run ./internal/bench/peers -records 3000000 -rounds 5
//
// -systems picks some of them, -users sets the distinct keys (peak RSS with
// 1M and 10M keys: -systems ebbflow -users 10000000 -records 10000000
// -shuffle-users), -profile DIR keeps a CPU
// profile of every ebbflow run (go tool pprof -top DIR/ebbflow-0.pprof).
//
// -window 10m is the windowed variant: every system aggregates per user and
// tumbling window of event time (the record's ts, Unix milliseconds), with
// watermarks -disorder behind the largest ts (the generator moves ts back by
// less than that, so no record is late), and the result is one row per
// (user, window start), each written once when its window closes (ebbflow
// emit: final, Flink's window operator) or read from the windowed store
// (Kafka Streams).
//
// It needs Maven and Java 17 (the peers are built from flink/ and streams/
// beside this file, dependencies from Maven Central). It is not part of CI.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
)

// agg is one user's exact aggregate.
type agg struct{ sum, count, max int64 }

// result is what one run of one system measured.
type result struct {
	system  string
	wall    time.Duration
	cpu     time.Duration
	maxRSS  int64 // bytes
	records int
}

func (r result) recordsPerSec() float64 { return float64(r.records) / r.wall.Seconds() }
func (r result) cpuPerRecord() float64 {
	return float64(r.cpu.Microseconds()) / float64(r.records)
}

// system is one contender: run starts it as a child process and returns
// where to read its result.
type system struct {
	name string
	run  func(ctx context.Context, b *bench, dir string) (*exec.Cmd, func() (map[string]agg, error), error)
}

type bench struct {
	gen         // the input
	brokers     []string
	topic       string
	partitions  int
	parallelism int
	oracle      map[string]agg // by resultKey
	root        string         // repository root
	work        string         // scratch folder of this invocation
	runner      string         // the built runner binary
	baseline    string         // the checkout whose runner the @baseline systems run ("" none)
	self        string         // this program's binary (for the raw consume child)
	profiles    string         // where ebbflow runs write CPU profiles ("" none)
}

func main() {
	var (
		brokers     = flag.String("brokers", envOr("EBBFLOW_KAFKA_BROKERS", "127.0.0.1:19092"), "Kafka brokers (comma separated)")
		records     = flag.Int("records", 3_000_000, "records to preload")
		users       = flag.Int("users", 100_000, "distinct users (keys)")
		partitions  = flag.Int("partitions", 4, "partitions of the input topic")
		parallelism = flag.Int("parallelism", 2, "parallelism of every system")
		rounds      = flag.Int("rounds", 5, "rounds (each runs every system once)")
		seed        = flag.Uint64("seed", uint64(time.Now().UnixNano()), "generator seed")
		only        = flag.String("systems", "", "comma-separated systems to run (default all): "+strings.Join(systemNames(), ","))
		profiles    = flag.String("profile", "", "write a CPU profile of every ebbflow run into this folder (<system>-<round>.pprof)")
		window      = flag.Duration("window", 0, "aggregate per user and tumbling event-time window of this length on ts (whole milliseconds; 0: per user only)")
		disorder    = flag.Duration("disorder", time.Second, "with -window: ts lags the largest before it by less than this (whole milliseconds), the watermarks' bound in every system")
		consume     = flag.String("consume", "", "internal: consume this topic to its end offsets and exit (the raw franz-go child)")
		shuffle     = flag.Bool("shuffle-users", false, "record i's user is user i mod -users of a seeded permutation (each user once per -users records: exactly min(records, users) distinct keys) instead of a random one")
		baseline    = flag.String("baseline", "", "another checkout of this repository (a git worktree of an older commit): the -baseline-systems also run with its runner, as <system>@baseline, in the same rounds")
		baseSystems = flag.String("baseline-systems", "ebbflow", "comma-separated systems that -baseline runs too (their job files must load in the older checkout)")
		embed       = flag.Bool("embedded", false, "start an embedded broker (kfake) in this process and run against it instead of -brokers: "+
			"for profiles without a real broker (the broker's CPU is this process's, not the children's)")
	)
	flag.Parse()
	if *window < 0 || *window%time.Millisecond != 0 || *disorder < 0 || *disorder%time.Millisecond != 0 {
		fmt.Fprintln(os.Stderr, "peers: -window and -disorder are whole milliseconds, not negative")
		os.Exit(2)
	}
	err := func() error {
		if *consume != "" {
			return rawConsume(strings.Split(*brokers, ","), *consume)
		}
		if *embed {
			br, err := embedded.Start(embedded.Options{})
			if err != nil {
				return err
			}
			defer br.Close()
			*brokers = strings.Join(br.Addrs(), ",")
		}
		g := gen{records: *records, users: *users, seed: *seed, window: *window, disorder: *disorder, shuffle: *shuffle}
		return run(strings.Split(*brokers, ","), g, *partitions, *parallelism, *rounds, *only, *profiles, *baseline, *baseSystems)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(brokers []string, g gen, partitions, parallelism, rounds int, only, profiles, baseline, baseSystems string) error {
	ctx := context.Background()
	root, err := repoRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "ebbflow-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b := &bench{gen: g, brokers: brokers, partitions: partitions, parallelism: parallelism,
		root: root, work: work, self: self, runner: filepath.Join(work, "ebbflow"), baseline: baseline}
	if profiles != "" {
		if b.profiles, err = filepath.Abs(profiles); err != nil {
			return err
		}
		if err := os.MkdirAll(b.profiles, 0o755); err != nil {
			return err
		}
	}

	systems := allSystems()
	if only != "" {
		want := strings.Split(only, ",")
		systems = slices.DeleteFunc(systems, func(s system) bool { return !slices.Contains(want, s.name) })
		if len(systems) == 0 {
			return fmt.Errorf("-systems %q: none of %s", only, strings.Join(systemNames(), ","))
		}
	}
	if baseline != "" {
		for _, s := range slices.Clone(systems) {
			if slices.Contains(strings.Split(baseSystems, ","), s.name) {
				systems = append(systems, system{s.name + "@baseline", s.run})
			}
		}
	}
	if err := b.build(systems); err != nil {
		return err
	}
	fmt.Printf("seed %d: preloading %d records of %d users over %d partitions\n", g.seed, g.records, g.users, partitions)
	b.topic = fmt.Sprintf("peers-%d-%s", g.seed, strconv.FormatInt(time.Now().UnixNano(), 36))
	if b.oracle, err = preload(ctx, brokers, b.topic, partitions, g); err != nil {
		return err
	}
	if g.window > 0 {
		fmt.Printf("per user and %s window of ts (each ts less than %s behind the largest before it): %d (user, window) results, %.1f records each\n",
			g.window, g.disorder, len(b.oracle), float64(g.records)/float64(len(b.oracle)))
	}

	var all []result
	for round := range rounds {
		// Rotate the order every round: no system always runs first.
		order := slices.Clone(systems)
		k := round % len(order)
		order = append(order[k:], order[:k]...)
		for _, s := range order {
			r, err := b.runOne(ctx, s, round)
			if err != nil {
				return fmt.Errorf("round %d: %s: %w", round+1, s.name, err)
			}
			fmt.Printf("round %d  %-20s %8.0f records/s  %6.2f µs CPU/record  %6d MiB peak RSS  (%.1f s)\n",
				round+1, s.name, r.recordsPerSec(), r.cpuPerRecord(), r.maxRSS>>20, r.wall.Seconds())
			all = append(all, r)
		}
	}
	report(os.Stdout, systems, all, rounds)
	return nil
}

// runOne runs one system once in a fresh folder and checks its result.
func (b *bench) runOne(ctx context.Context, s system, round int) (result, error) {
	dir := filepath.Join(b.work, fmt.Sprintf("%s-%d", s.name, round))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	cmd, read, err := s.run(ctx, b, dir)
	if err != nil {
		return result{}, err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, fmt.Errorf("%v: %w", cmd.Args, err)
	}
	peak := watchPeakRSS(cmd.Process.Pid)
	err = cmd.Wait()
	wall := time.Since(start)
	if err != nil {
		return result{}, fmt.Errorf("%v: %w\n%s", cmd.Args, err, tail(out.String(), 40))
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r := result{system: s.name, wall: wall, records: b.records,
		cpu:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		maxRSS: peak()}
	if read != nil {
		got, err := read()
		if err != nil {
			return result{}, fmt.Errorf("read result: %w", err)
		}
		if err := compare(b.oracle, got); err != nil {
			return result{}, fmt.Errorf("wrong result: %w", err)
		}
	}
	return r, nil
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// compare reports the first differences between the exact aggregates and a
// system's result.
func compare(want, got map[string]agg) error {
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s missing (want %v)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s = %v, not in the input", k, g))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	return fmt.Errorf("%d keys differ, e.g. %s", len(diffs), strings.Join(diffs[:min(5, len(diffs))], "; "))
}

// report prints per system the median of every figure and its ratios.
func report(w *os.File, systems []system, all []result, rounds int) {
	med := func(name string, f func(result) float64) float64 {
		var v []float64
		for _, r := range all {
			if r.system == name {
				v = append(v, f(r))
			}
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		return v[len(v)/2]
	}
	rate := func(r result) float64 { return r.recordsPerSec() }
	cpu := func(r result) float64 { return r.cpuPerRecord() }
	rss := func(r result) float64 { return float64(r.maxRSS >> 20) }
	ref := med("ebbflow", rate)
	raw := med("raw-consume", rate)
	fmt.Fprintf(w, "\nmedians over %d rounds\n", rounds)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\trecords/s\tCPU µs/record\tpeak RSS MiB\t× ebbflow\t× raw consume\t")
	for _, s := range systems {
		r := med(s.name, rate)
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.0f\t%s\t%s\t\n", s.name, r, med(s.name, cpu), med(s.name, rss), ratio(r, ref), ratio(r, raw))
	}
	tw.Flush()
	// Ratios per round, for the targets stated as ratios in one run.
	fmt.Fprintln(w, "\nebbflow ÷ other, per round (throughput)")
	for _, s := range systems {
		if s.name == "ebbflow" {
			continue
		}
		var per, cpus []string
		for round := range rounds {
			e, o := findRound(all, "ebbflow", round), findRound(all, s.name, round)
			if e != nil && o != nil {
				per = append(per, fmt.Sprintf("%.2f", e.recordsPerSec()/o.recordsPerSec()))
				cpus = append(cpus, fmt.Sprintf("%.2f", o.cpuPerRecord()/e.cpuPerRecord()))
			}
		}
		fmt.Fprintf(w, "  vs %-34s %s   (its CPU per record ÷ ebbflow's: %s)\n", s.name, strings.Join(per, " "), strings.Join(cpus, " "))
	}
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// findRound returns the round-th result of a system (results are appended
// round by round).
func findRound(all []result, name string, round int) *result {
	n := 0
	for i := range all {
		if all[i].system == name {
			if n == round {
				return &all[i]
			}
			n++
		}
	}
	return nil
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run from inside the ebbflow module")
	}
	return filepath.Dir(mod), nil
}

// build compiles the runner and the peers the chosen systems need.
func (b *bench) build(systems []system) error {
	need := func(prefix string) bool {
		return slices.ContainsFunc(systems, func(s system) bool { return strings.HasPrefix(s.name, prefix) })
	}
	steps := [][]string{}
	if need("ebbflow") {
		steps = append(steps, []string{b.root, "go", "build", "-tags", "pebblegozstd", "-trimpath", "-o", b.runner, "./cmd/runner"}) // as .ci/build
		if b.baseline != "" {
			steps = append(steps, []string{b.baseline, "go", "build", "-tags", "pebblegozstd", "-trimpath", "-o", b.runner + "-baseline", "./cmd/runner"})
		}
	}
	if need("flink") {
		steps = append(steps, []string{filepath.Join(b.root, "internal/bench/peers/flink"), "mvn", "-q", "-B", "package"})
	}
	if need("streams") {
		steps = append(steps, []string{filepath.Join(b.root, "internal/bench/peers/streams"), "mvn", "-q", "-B", "package"})
	}
	for _, s := range steps {
		fmt.Printf("building: (cd %s && %s)\n", s[0], strings.Join(s[1:], " "))
		cmd := exec.Command(s[1], s[2:]...)
		cmd.Dir = s[0]
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(s[1:], " "), err, tail(string(out), 40))
		}
	}
	return nil
}

// gen is the seeded generator of the input.
type gen struct {
	records, users int
	seed           uint64
	window         time.Duration // tumbling event-time windows (0: one aggregate per user)
	disorder       time.Duration // with window: ts lags the largest before it by less than this
	shuffle        bool          // users in the order of a seeded permutation, each once per users records
}

// generate makes the input: record i has a random user and amount and the
// event time ts = 1_700_000_000_000 + i ms, less a random 0..disorder ms
// when windowed (so it lags the largest ts before it by less than
// disorder). It returns the exact aggregates by resultKey; emit gets each
// record's user (its Kafka key) and JSON value.
func (g gen) generate(emit func(user string, value []byte)) map[string]agg {
	rng := rand.New(rand.NewPCG(g.seed, g.seed^0x9e3779b97f4a7c15))
	oracle := make(map[string]agg, g.users)
	lag := g.disorder.Milliseconds()
	var perm []int
	if g.shuffle {
		perm = rng.Perm(g.users)
	}
	for i := range g.records {
		u := rng.IntN(g.users)
		if perm != nil {
			u = perm[i%g.users]
		}
		user := fmt.Sprintf("u%06d", u)
		amount := int64(rng.IntN(1000))
		ts := 1_700_000_000_000 + int64(i)
		if g.window > 0 && lag > 0 { // no draw otherwise: a seed makes the same input as before windows
			ts -= rng.Int64N(lag + 1)
		}
		k := resultKey(user, ts, g.window)
		a, ok := oracle[k]
		if !ok {
			a.max = amount
		}
		a.sum += amount
		a.count++
		a.max = max(a.max, amount)
		oracle[k] = a
		emit(user, fmt.Appendf(nil, `{"user":%q,"amount":%d,"ts":%d,"kind":"purchase","region":"eu-west-1","seq":%d}`,
			user, amount, ts, i))
	}
	return oracle
}

// resultKey names one result: the user, and with windows the start of the
// record's tumbling window in Unix milliseconds ("u000042@1700000400000"),
// a multiple of the window's length since the Unix epoch as in every system.
func resultKey(user string, tsMillis int64, window time.Duration) string {
	if window == 0 {
		return user
	}
	w := window.Milliseconds()
	return windowKey(user, tsMillis-((tsMillis%w)+w)%w)
}

// windowKey is resultKey from a window's start, as the systems report it.
func windowKey(user string, startMillis int64) string {
	return user + "@" + strconv.FormatInt(startMillis, 10)
}

// preload writes the generated input, keyed by the user so that every system
// sees one user in one partition, and returns its exact aggregates.
func preload(ctx context.Context, brokers []string, topic string, partitions int, g gen) (map[string]agg, error) {
	adm, cl, err := admin(brokers)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if _, err := adm.CreateTopic(ctx, int32(partitions), 1, nil, topic); err != nil {
		return nil, fmt.Errorf("create topic %s: %w", topic, err)
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	var failed atomic.Pointer[error]
	oracle := g.generate(func(user string, value []byte) {
		pr.Produce(ctx, &kgo.Record{Key: []byte(user), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	})
	if err := pr.Flush(ctx); err != nil {
		return nil, err
	}
	if err := failed.Load(); err != nil {
		return nil, fmt.Errorf("produce: %w", *err)
	}
	return oracle, nil
}

func admin(brokers []string) (*kadm.Client, *kgo.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl, nil
}

// endOffsets returns the end offset of every partition of topic.
func endOffsets(ctx context.Context, brokers []string, topic string) (map[int32]int64, error) {
	adm, cl, err := admin(brokers)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// rawConsume is the limit: a plain franz-go consumer reading the topic from
// the start to its end offsets, touching every key and value.
func rawConsume(brokers []string, topic string) error {
	ctx := context.Background()
	ends, err := endOffsets(ctx, brokers, topic)
	if err != nil {
		return err
	}
	from := map[int32]kgo.Offset{}
	left := 0
	for p, end := range ends {
		from[p] = kgo.NewOffset().AtStart()
		left += int(end)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	if err != nil {
		return err
	}
	defer cl.Close()
	var bytes int
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			bytes += len(r.Key) + len(r.Value)
			left--
		})
	}
	fmt.Printf("read %d bytes\n", bytes)
	return nil
}

func systemNames() []string {
	var n []string
	for _, s := range allSystems() {
		n = append(n, s.name)
	}
	return n
}

func allSystems() []system {
	return []system{
		{"raw-consume", func(_ context.Context, b *bench, _ string) (*exec.Cmd, func() (map[string]agg, error), error) {
			return exec.Command(b.self, "-brokers", strings.Join(b.brokers, ","), "-consume", b.topic), nil, nil
		}},
		{"ebbflow", ebbflow(false, "")},
		{"ebbflow-changelog", ebbflow(true, "")},
		{"ebbflow-flush-checkpoint", ebbflow(false, "checkpoint")},
		{"ebbflow-changelog-flush-checkpoint", ebbflow(true, "checkpoint")},
		{"flink-hashmap", flink("hashmap", "discard")},
		{"flink-rocksdb", flink("rocksdb", "discard")},
		{"flink-hashmap-kafka", flink("hashmap", "kafka")},
		{"streams", streams},
	}
}

// ebbflowJob is the runner's job file; the changelog variant publishes the
// table's changelog in committed mode, and the run ends when the export has
// caught up. The windowed variant (ebbflowWindow) adds ts, event time and
// the table's window. The flush-checkpoint variants set the sink's
// flush_interval to checkpoint (the default is 100ms): each key is written
// to the table once per checkpoint, as Kafka Streams' cache flushes once
// per commit.
const ebbflowJob = `job: {name: peers, parallelism: %d}
source:
  kafka:
    brokers: [%q]
    topics: [%q]
    format: json
    start_offset: earliest
    bounded: true
%s
key_by: [user]
sink:
  table:
    name: totals
    primary_key: [user]
    buckets: 8
    columns:
      total:   {agg: sum, from: amount}
      n:       {agg: count}
      largest: {agg: max, from: amount}
%s%s
checkpoint: {interval: 1s}
data_dir: %q
http: {address: ""}
`

// ebbflowWindow returns the job file's source schema (with event time) and
// table window lines. emit: final writes each (user, window) row once, when
// the watermark passes the window's end, as Flink's window operator emits
// each window once; the bounded source ends event time, which closes every
// window.
func ebbflowWindow(window, disorder time.Duration) (source, table string) {
	if window == 0 {
		return "    schema: {user: string, amount: int64}", ""
	}
	return fmt.Sprintf("    schema: {user: string, amount: int64, ts: timestamp}\n"+
			"    event_time: {field: ts, max_out_of_orderness: %s}", disorder),
		fmt.Sprintf("    window: {tumble: %s, on: ts, emit: final}\n", window)
}

func ebbflow(changelog bool, flush string) func(context.Context, *bench, string) (*exec.Cmd, func() (map[string]agg, error), error) {
	return func(ctx context.Context, b *bench, dir string) (*exec.Cmd, func() (map[string]agg, error), error) {
		runner := b.runner
		if strings.Contains(filepath.Base(dir), "@baseline") { // runOne names dir <system>-<round>
			runner += "-baseline"
		}
		cl := ""
		// A topic name has no '@' (the @baseline systems' dirs do).
		topic := "peers-changelog-" + strings.ReplaceAll(filepath.Base(dir), "@", ".") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if changelog {
			cl = fmt.Sprintf("    changelog: {topic: %q, mode: committed}", topic)
		}
		if flush != "" {
			cl = strings.TrimPrefix(cl+"\n", "\n") + fmt.Sprintf("    flush_interval: %s", flush)
		}
		data := filepath.Join(dir, "data")
		job := filepath.Join(dir, "job.yaml")
		source, window := ebbflowWindow(b.window, b.disorder)
		if err := os.WriteFile(job, fmt.Appendf(nil, ebbflowJob, b.parallelism, b.brokers[0], b.topic, source, window, cl, data), 0o644); err != nil {
			return nil, nil, err
		}
		read := func() (map[string]agg, error) {
			got, err := scanTable(runner, data)
			if err != nil || !changelog {
				return got, err
			}
			// The committed changelog must hold the same rows.
			rows, err := readCommitted(ctx, b.brokers, topic, parseChangelogRow)
			if err != nil {
				return nil, fmt.Errorf("changelog: %w", err)
			}
			if err := compare(got, rows); err != nil {
				return nil, fmt.Errorf("changelog differs from the table: %w", err)
			}
			return got, nil
		}
		args := []string{"run", "-f", job, "--log-level", "warn"}
		if b.profiles != "" {
			args = append(args, "--cpu-profile", filepath.Join(b.profiles, filepath.Base(dir)+".pprof"))
		}
		return exec.Command(runner, args...), read, nil
	}
}

// scanTable reads the table with `runner table scan -o json`.
func scanTable(runner, data string) (map[string]agg, error) {
	out, err := exec.Command(runner, "table", "scan", "--data-dir", data, "--table", "totals", "-o", "json").Output()
	if err != nil {
		return nil, fmt.Errorf("table scan: %w", err)
	}
	got := map[string]agg{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		user, a, err := parseRow(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("table scan line %q: %w", sc.Text(), err)
		}
		got[user] = a
	}
	return got, sc.Err()
}

// parseRow decodes a row of the ebbflow table as JSON (table scan -o json
// and the upsert-json changelog write the same object) and returns its
// resultKey: the user, and the window's start if the table has windows.
func parseRow(data []byte) (string, agg, error) {
	var row struct {
		User              string
		WindowStart       *time.Time `json:"window_start"`
		Total, N, Largest int64
	}
	err := json.Unmarshal(data, &row)
	key := row.User
	if row.WindowStart != nil {
		key = windowKey(row.User, row.WindowStart.UnixMilli())
	}
	return key, agg{row.Total, row.N, row.Largest}, err
}

// parseChangelogRow decodes an upsert-json record of the ebbflow table.
func parseChangelogRow(r *kgo.Record) (string, agg, error) { return parseRow(r.Value) }

// parseCSVAgg decodes the peers' "sum,count,max" value keyed by the
// resultKey.
func parseCSVAgg(r *kgo.Record) (string, agg, error) {
	a, err := parseAgg(string(r.Value))
	return string(r.Key), a, err
}

func parseAgg(s string) (agg, error) {
	f := strings.Split(s, ",")
	if len(f) != 3 {
		return agg{}, fmt.Errorf("want sum,count,max: %q", s)
	}
	var a agg
	var err [3]error
	a.sum, err[0] = strconv.ParseInt(f[0], 10, 64)
	a.count, err[1] = strconv.ParseInt(f[1], 10, 64)
	a.max, err[2] = strconv.ParseInt(f[2], 10, 64)
	return a, errors.Join(err[:]...)
}

// readCommitted replays a topic (read_committed) to its end offsets, the
// latest value per key winning. Transaction markers are fetched too, so that
// reaching an end offset that lies past the last record is seen.
func readCommitted(ctx context.Context, brokers []string, topic string, parse func(*kgo.Record) (string, agg, error)) (map[string]agg, error) {
	ends, err := endOffsets(ctx, brokers, topic)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	got := map[string]agg{}
	done := func() bool {
		for p, end := range ends {
			if end > 0 {
				return false
			}
			delete(ends, p)
		}
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("read %s: %w", topic, err)
		}
		var perr error
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= ends[r.Partition] {
				ends[r.Partition] = 0
			}
			if r.Attrs.IsControl() { // a transaction marker: counted for the end, no row
				return
			}
			k, a, err := parse(r)
			if err != nil {
				perr = err
				return
			}
			got[k] = a
		})
		if perr != nil {
			return nil, perr
		}
	}
	return got, nil
}

func java(b *bench, module, main string, args ...string) *exec.Cmd {
	dir := filepath.Join(b.root, "internal/bench/peers", module, "target")
	cp := filepath.Join(dir, "classes") + string(os.PathListSeparator) + filepath.Join(dir, "dependency", "*")
	return exec.Command("java", append([]string{"-cp", cp, main}, args...)...)
}

func flink(backend, sink string) func(context.Context, *bench, string) (*exec.Cmd, func() (map[string]agg, error), error) {
	return func(ctx context.Context, b *bench, dir string) (*exec.Cmd, func() (map[string]agg, error), error) {
		out := filepath.Join(dir, "result.csv")
		outTopic := "peers-flink-out-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		cmd := java(b, "flink", "dev.ebbflow.peers.FlinkAgg", strings.Join(b.brokers, ","), b.topic,
			strconv.Itoa(b.parallelism), backend, sink, outTopic, out, filepath.Join(dir, "checkpoints"),
			millis(b.window), millis(b.disorder))
		read := func() (map[string]agg, error) {
			if sink == "kafka" {
				return readCommitted(ctx, b.brokers, outTopic, parseCSVAgg)
			}
			return readResultFile(out)
		}
		return cmd, read, nil
	}
}

func streams(_ context.Context, b *bench, dir string) (*exec.Cmd, func() (map[string]agg, error), error) {
	out := filepath.Join(dir, "result.csv")
	cmd := java(b, "streams", "dev.ebbflow.peers.StreamsAgg", strings.Join(b.brokers, ","), b.topic,
		strconv.Itoa(b.parallelism), out, filepath.Join(dir, "state"), millis(b.window), millis(b.disorder))
	return cmd, func() (map[string]agg, error) { return readResultFile(out) }, nil
}

// millis is a duration as the peers' arguments take it.
func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// readResultFile reads "key,sum,count,max" lines (key: the resultKey).
func readResultFile(path string) (map[string]agg, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	got := map[string]agg{}
	for line := range strings.Lines(string(data)) {
		user, rest, ok := strings.Cut(strings.TrimSpace(line), ",")
		if !ok {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		a, err := parseAgg(rest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		got[user] = a
	}
	return got, nil
}

// watchPeakRSS polls the high-water mark of a child's resident set
// (VmHWM in /proc/<pid>/status) until the returned function is called after
// the child was waited for, and returns the last value read. rusage's
// ru_maxrss cannot serve: it survives exec, so a child started by this
// (large) process reports this process's size when it is larger.
func watchPeakRSS(pid int) func() int64 {
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		path := fmt.Sprintf("/proc/%d/status", pid)
		for {
			if data, err := os.ReadFile(path); err == nil {
				for line := range strings.Lines(string(data)) {
					if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
						peak.Store(max(peak.Load(), kb<<10))
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return peak.Load()
	}
}
