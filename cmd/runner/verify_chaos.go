package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/proc"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
)

// chaosFlags are the flags of verify --chaos.
type chaosFlags struct {
	kills      int
	seed       int64
	killAfter  time.Duration
	killWithin time.Duration
	settle     time.Duration
	records    int64
	keep       bool
	copyInput  bool
	dir        string // --data-dir, when given
}

func (c *chaosFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&c.kills, "chaos", 0, "first run the job in a fresh data directory (--data-dir, which must be empty, else a temporary one) and SIGKILL it N times at seeded random moments, then verify")
	fl.Int64Var(&c.seed, "seed", 0, "--chaos: the seed of the kill schedule (0: from the clock; printed)")
	fl.DurationVar(&c.killAfter, "kill-after", 0, "--chaos: the earliest moment of a kill after the runner is up (kills during start-up, before any record is processed, test little)")
	fl.DurationVar(&c.killWithin, "kill-within", 3*time.Second, "--chaos: each kill falls at a random moment within this long after the runner is up")
	fl.DurationVar(&c.settle, "settle", 3*time.Second, "--chaos: how long the last run goes on before it is stopped (SIGTERM), unless its input ends first")
	fl.Int64Var(&c.records, "records", 10000, "--chaos: the count of a datagen source that has none (an endless one)")
	fl.BoolVar(&c.keep, "keep", false, "--chaos: keep the data directory after a pass (it is always kept after a failure)")
	fl.BoolVar(&c.copyInput, "copy-input", false, "--chaos: copy the topics of each Kafka source, up to their end as of the start, into <topic>-verify-<seed> on the same cluster, and run the job on the copies")
}

// chaos runs the job of f under f.chaos.kills SIGKILLs in a fresh data
// directory, restarting it after each, lets its last run go on for
// f.chaos.settle, stops it gracefully, and verifies the result. The run
// touches nothing of the job's own: its consumer group, the topic a datagen
// produces into, the changelog topic and transactional id, and the
// dead-letter topic get names ending in -verify-<seed> (on a real cluster;
// the fresh data directory has its own embedded broker).
func chaos(ctx context.Context, w io.Writer, f *verifyFlags) error {
	c := &f.chaos
	if c.kills < 1 {
		return usageErr("--chaos %d: want at least 1 kill", c.kills)
	}
	if c.killWithin <= 0 || c.records < 1 {
		return usageErr("--kill-within and --records must be positive")
	}
	if c.killAfter < 0 || c.killAfter >= c.killWithin {
		return usageErr("--kill-after %s must be at least 0 and less than --kill-within %s", c.killAfter, c.killWithin)
	}
	seed := c.seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	fmt.Fprintf(w, "chaos: seed %d (repeat with --seed %d)\n", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	sets, err := chaosSets(ctx, w, f, seed)
	if err != nil {
		return err
	}
	dir, made, err := chaosDir(f)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "chaos: data directory %s\n", dir)
	for _, s := range sets {
		fmt.Fprintf(w, "chaos: the runs use --set %s\n", s)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("chaos: find the runner binary: %w", err)
	}
	args := []string{"run", "--data-dir", dir, "--http-address", "127.0.0.1:0", "--summary", "0"}
	for _, file := range f.files {
		args = append(args, "-f", file)
	}
	all := append(append([]string{}, f.sets...), sets...)
	for _, s := range all {
		args = append(args, "--set", s)
	}
	for k := 1; k <= c.kills; k++ {
		r, err := startChaosRun(exe, args, dir, k)
		if err != nil {
			return err
		}
		if err := r.untilUp(ctx, dir); err != nil {
			return err
		}
		d := c.killAfter + time.Duration(rng.Int64N(int64(c.killWithin-c.killAfter)))
		if ended := r.sleep(ctx, d); ended {
			return r.failed(fmt.Sprintf("the runner of run %d exited before its kill (an input that ended? give it more, or a shorter --kill-within)", k))
		}
		if err := r.Kill(); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		fmt.Fprintf(w, "chaos: run %d killed (SIGKILL) %s after it was up\n", k, d.Round(time.Millisecond))
	}
	r, err := startChaosRun(exe, args, dir, c.kills+1)
	if err != nil {
		return err
	}
	if err := r.untilUp(ctx, dir); err != nil {
		return err
	}
	if ended := r.sleep(ctx, c.settle); !ended {
		if err := r.Signal(syscall.SIGTERM); err != nil {
			return fmt.Errorf("chaos: stop the runner: %w", err)
		}
		select {
		case <-r.Done():
		case <-ctx.Done():
			_ = r.Kill()
			return fmt.Errorf("chaos: the last run did not stop: %w", ctx.Err())
		}
	}
	if r.Err() != nil {
		return r.failed("the last run did not end cleanly")
	}
	fmt.Fprintf(w, "chaos: run %d stopped with a final checkpoint\n", c.kills+1)

	files, err := pipelines.ReadFiles(f.files...)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ps, err := pipelines.Load(files, pipelines.Options{Set: all})
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if err := verify(ctx, w, dir, ps[0], f.table, f.maxDiffs); err != nil {
		fmt.Fprintf(w, "chaos: the data directory %s is kept, and the runs' logs in %s\n", dir, filepath.Join(dir, chaosLogs))
		return err
	}
	if made && !c.keep {
		return os.RemoveAll(dir)
	}
	return nil
}

// chaosLogs is the folder of the data directory that holds the runs' logs.
const chaosLogs = "verify-chaos-logs"

// chaosDir returns the fresh data directory: --data-dir, which must be
// empty or absent, else a new temporary one (made).
func chaosDir(f *verifyFlags) (dir string, made bool, err error) {
	if f.chaos.dir == "" {
		dir, err := os.MkdirTemp("", "ebbflow-verify-")
		return dir, true, err
	}
	dir = f.chaos.dir
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	if len(entries) > 0 {
		return "", false, usageErr("--chaos runs the job in a fresh data directory: --data-dir %s is not empty", dir)
	}
	return dir, false, os.MkdirAll(dir, 0o755)
}

// chaosSets returns the overrides that keep a chaos run off the job's own
// group and topics and bound its datagen sources; with --copy-input it
// copies the Kafka sources' topics first.
func chaosSets(ctx context.Context, w io.Writer, f *verifyFlags, seed int64) ([]string, error) {
	p := f.jobs[0]
	suffix := "-verify-" + strconv.FormatInt(seed, 10)
	var sets []string
	// set adds path=value, written for a source or sink list or for its
	// one element, whichever the file has.
	set := func(list string, i int, path, value string) error {
		for _, s := range []string{fmt.Sprintf("%s[%d].%s=%s", list, i, path, value), fmt.Sprintf("%s.%s=%s", list, path, value)} {
			files, err := pipelines.ReadFiles(f.files...)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if _, err := pipelines.Load(files, pipelines.Options{Set: append(append(append([]string{}, f.sets...), sets...), s)}); err == nil {
				sets = append(sets, s)
				return nil
			}
		}
		return fmt.Errorf("chaos: cannot set %s[%d].%s", list, i, path)
	}
	for i, s := range p.Spec.Sources {
		var err error
		switch {
		case s.Kafka != nil && s.Kafka.Embedded():
			return nil, usageErr("source %q reads the embedded broker of the job's data directory, which a chaos run in a fresh one does not have: "+
				"give the source a broker (--set source.kafka.brokers=[host:port])", s.Name)
		case s.Kafka != nil:
			err = set("source", i, "kafka.group", s.Kafka.Group+suffix)
			if err == nil && f.chaos.copyInput {
				var copies []string
				if copies, err = copyTopics(ctx, w, s, suffix); err == nil {
					err = set("source", i, "kafka.topics", "["+strings.Join(copies, ",")+"]")
				}
			}
			if err == nil && s.Kafka.DeadLetterTopic != "" {
				err = set("source", i, "kafka.dead_letter_topic", s.Kafka.DeadLetterTopic+suffix)
			}
		case s.Datagen != nil:
			if s.Datagen.Count == 0 {
				err = set("source", i, "datagen.count", strconv.FormatInt(f.chaos.records, 10))
			}
			if err == nil && s.Datagen.Topic != "" && !s.Datagen.Kafka.Embedded() {
				err = set("source", i, "datagen.topic", s.Datagen.Topic+suffix)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	for i, t := range p.Tables {
		cl := t.Spec.Changelog
		if cl == nil || cl.Embedded() {
			continue
		}
		err := set("sink", i, "table.changelog.topic", cl.Topic+suffix)
		if err == nil && cl.TransactionalID != "" {
			err = set("sink", i, "table.changelog.transactional_id", cl.TransactionalID+suffix)
		}
		if err != nil {
			return nil, err
		}
	}
	return sets, nil
}

// chaosRun is one runner process of a chaos run, its output in log.
type chaosRun struct {
	*proc.Process
	log string
}

func startChaosRun(exe string, args []string, dir string, n int) (*chaosRun, error) {
	logs := filepath.Join(dir, chaosLogs)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	r := &chaosRun{log: filepath.Join(logs, fmt.Sprintf("run-%d.log", n))}
	out, err := os.Create(r.log)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own descriptor
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if r.Process, err = proc.Start(cmd); err != nil {
		return nil, fmt.Errorf("chaos: start the runner: %w", err)
	}
	return r, nil
}

// untilUp waits until the runner answers on its HTTP address (it has
// opened its tables and built its jobs), or fails when it exits first.
func (r *chaosRun) untilUp(ctx context.Context, dir string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if e, _ := findRunner(dir, ""); e != nil {
			return nil
		}
		select {
		case <-r.Done():
			return r.failed("the runner exited before it was up")
		case <-ctx.Done():
			_ = r.Kill()
			return fmt.Errorf("chaos: the runner was not up in time: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// sleep waits d, or until the runner ends (true).
func (r *chaosRun) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.Done():
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// failed is the error of a run that went wrong, pointing at its log.
func (r *chaosRun) failed(what string) error {
	err := r.Err()
	code, status := exitFailure, "exit 0"
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		code = ee.ExitCode()
	}
	if err != nil {
		status = err.Error()
	}
	return &exitError{code: code, err: fmt.Errorf("chaos: %s (%s); its log: %s", what, status, r.log)}
}

// copyTopics copies the topics of Kafka source s (read as the source reads
// them, from the start up to their last stable offsets as of now) into
// new topics named <topic><suffix> with as many partitions, each record to
// the same partition with its key, value, headers and timestamp, and
// returns the copies' names.
func copyTopics(ctx context.Context, w io.Writer, s pipelines.Source, suffix string) ([]string, error) {
	if s.Kafka.TopicPattern != "" {
		return nil, usageErr("--copy-input copies the topics a source names: source %q has topic_pattern", s.Name)
	}
	env := build.NewEnv(build.Options{})
	defer env.Close()
	conn, err := env.KafkaConnection(s.Kafka.Connection) // not embedded: checked
	if err != nil {
		return nil, err
	}
	opts, err := conn.Options()
	if err != nil {
		return nil, err
	}
	if s.Kafka.IsolationLevel == "read_uncommitted" {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var copies []string
	for _, topic := range s.Kafka.Topics {
		starts, ends, err := topicOffsets(ctx, opts, s.Kafka.Cluster(), topic)
		if err != nil {
			return nil, fmt.Errorf("copy topic %q: %w", topic, err)
		}
		dst := topic + suffix
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, int32(len(ends)), -1, nil, dst); err != nil {
			return nil, fmt.Errorf("copy topic %q: create %q: %w", topic, dst, err)
		}
		n := 0
		var mu sync.Mutex
		var produceErr error
		err = readPartitions(ctx, opts, topic, starts, ends, func(r *kgo.Record) error {
			n++
			c := &kgo.Record{Topic: dst, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
			cl.Produce(ctx, c, func(_ *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				produceErr = cmp.Or(produceErr, err)
			})
			return nil
		})
		if err == nil {
			err = cl.Flush(ctx)
		}
		mu.Lock()
		err = cmp.Or(err, produceErr)
		mu.Unlock()
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("copy topic %q to %q: %w", topic, dst, err)
		}
		fmt.Fprintf(w, "chaos: copied %d records of topic %q into %q\n", n, topic, dst)
		copies = append(copies, dst)
	}
	return copies, nil
}
