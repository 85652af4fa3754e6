package writer_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/chaos"
	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

var killsFlag = flag.Int("kills", 20, "SIGKILLs of the crash harness before the job may finish")

// The crash harness: Kafka → decode → exactly-once writer (sum, count, max,
// last_value, listagg; or, in the skip-undo modes, only idempotent
// functions, see skipundo_test.go), in a child process killed with SIGKILL.
const (
	crashEnv   = "EBBFLOW_WRITER_CRASH" // the child's data dir
	crashCount = 40_000
	crashParts = 8 // divides keys: every key lives in one partition, in order
)

// jobs of a harness mode: one job writing every column, or two jobs
// writing disjoint columns of the same table.
func jobsOf(mode string) map[string][]string {
	if mode == "two" {
		return map[string][]string{"sums-a": {"total", "n", "top"}, "sums-b": {"last", "seqs", "n2"}}
	}
	return map[string][]string{"sums": nil}
}

func TestMain(m *testing.M) { crashtest.Main(m, crashEnv, crashChild) }

// mapperFor maps an event to the values of the named columns (all of sch's
// when none are named).
func mapperFor(sch aggmerge.Schema, cols []string) writer.Mapper[operators.Event] {
	if len(cols) == 0 {
		for _, c := range sch.Values {
			cols = append(cols, c.Name)
		}
	}
	return func(e operators.Event, r *writer.Row) error {
		r.Kind = runtime.RowInsert
		r.Key = append(r.Key[:0], agg.IntValue(int64(e.Seq%keys)))
		r.Vals = r.Vals[:0]
		for _, c := range cols {
			switch c {
			case "total", "top":
				r.Vals = append(r.Vals, agg.IntValue(e.Value))
			case "n", "n2":
				r.Vals = append(r.Vals, agg.IntValue(1))
			case "last", "first", "high":
				r.Vals = append(r.Vals, agg.IntValue(int64(e.Seq)))
			case "seqs":
				r.Vals = append(r.Vals, agg.StringValue(strconv.FormatUint(e.Seq, 10)))
			case "low":
				r.Vals = append(r.Vals, agg.IntValue(-int64(e.Seq)))
			case "seen":
				r.Vals = append(r.Vals, agg.Bitmap64Value(e.Seq))
			}
		}
		return nil
	}
}

// crashChild runs the harness's jobs on one table until killed, or, in the
// final run, until every input record is in the table. In the skip-undo
// modes it also exports the table's changelog (committed mode) to the
// CHANGELOG topic, and the final run ends once the export caught up.
func crashChild(dir string) error {
	env := func(k string) string { return os.Getenv(crashEnv + "_" + k) }
	sch := schemaOf(env("MODE"))
	tbl, err := aggmerge.Open(filepath.Join(dir, "table"), sch, aggmerge.Options{SyncWrites: env("SYNC") == "1"})
	if err != nil {
		return err
	}
	defer tbl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var x *childExport
	if topic := env("CHANGELOG"); topic != "" {
		if x, err = startExport(tbl, strings.Split(env("BROKERS"), ","), topic); err != nil {
			return err
		}
		defer x.stop()
	}
	par, _ := strconv.Atoi(env("PAR"))
	seed, _ := strconv.ParseInt(env("SEED"), 10, 64)
	var jobs []*runtime.Job
	var regs []*prometheus.Registry // per job: a completed checkpoint shows its undo is done
	for name, cols := range jobsOf(env("MODE")) {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		opts := runtime.Options{Name: name, DataDir: dir, Parallelism: par, BatchSize: 128, Logger: childLogger(), Registerer: reg,
			Checkpoint: runtime.CheckpointOptions{Interval: 200 * time.Millisecond},
			Restart:    runtime.RestartOptions{InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}}
		if id := env("RESTORE_" + name); id != "" {
			n, _ := strconv.ParseUint(id, 10, 64)
			opts.Restore = runtime.RestoreCheckpoint(barrierID(n))
		}
		j := runtime.NewJob(opts)
		srcCfg, srcOpts := kafka.Config{Connection: kafka.Connection{Brokers: strings.Split(env("BROKERS"), ",")}, Topics: []string{env("TOPIC")}}, []kafka.Option[operators.Event](nil)
		if env("MODE") == modeWindow {
			srcCfg.EventTime, srcOpts = &kafka.EventTime{}, crashEventTime
		}
		src, err := kafka.NewSource(srcCfg, kafka.JSON[operators.Event](), srcOpts...)
		if err != nil {
			return err
		}
		events := runtime.Map(runtime.FromSource(j, "kafka", src.New), "slow", func(e operators.Event) operators.Event {
			if e.Seq%32 == 0 {
				time.Sleep(time.Millisecond) // keep the job behind the producer
			}
			return e
		})
		if env("MODE") == "two" {
			// each job also fails on its own, in process: killed
			// independently; one fault per site and subtask in each child.
			// None in the final run (the operator stays, with its state): a
			// fault there restarts a job, whose undo can take back what
			// stopWhenComplete saw, and the stop then ends it before its
			// replay.
			budget := 1
			if env("FINAL") != "" {
				budget = 0
			}
			events = chaos.Operator(events, "chaos", chaos.New(seed+int64(len(name)+len(jobs)), budget))
		}
		// Writes reach the table every 10 ms, between checkpoints 200 ms
		// apart: most kills leave writes past the last checkpoint to undo.
		// With FLUSH=checkpoint writes reach the table at barriers only: past
		// the last completed checkpoint there is then only what a checkpoint
		// that did not complete flushed.
		cfg := writer.Config{Table: tbl, Columns: cols, UnsafeSkipUndo: env("SKIPUNDO") != "",
			FlushInterval: 10 * time.Millisecond, NoCombine: env("NOCOMBINE") != ""}
		if env("FLUSH") == "checkpoint" {
			cfg.FlushInterval = writer.FlushAtCheckpoint
		}
		mapper := mapperFor(sch, cols)
		if env("MODE") == modeWindow {
			cfg.Window, mapper = crashWindow(), mapCrashWindowed
		}
		if err := writer.To(events, "table", cfg, mapper); err != nil {
			return err
		}
		jobs = append(jobs, j)
	}
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { errs <- j.Run(ctx) }()
	}
	if n := env("FINAL"); n != "" {
		want, _ := strconv.ParseInt(n, 10, 64)
		go stopWhenComplete(tbl, want, jobs, regs, env("MODE"))
	}
	for range jobs {
		if err := <-errs; err != nil {
			return err
		}
	}
	if x != nil && env("FINAL") != "" {
		return x.caughtUp()
	}
	return nil
}

// childLogger logs to stderr when EBBFLOW_WRITER_CRASH_LOG is set.
func childLogger() *slog.Logger {
	if os.Getenv(crashEnv+"_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func checkpointsDone(reg *prometheus.Registry) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "ebbflow_checkpoints_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" && l.GetValue() == "completed" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func barrierID(n uint64) barrier.CheckpointID { return barrier.CheckpointID(n) }

// stopWhenComplete stops the jobs (final checkpoint) once both count
// columns (eventsIn) reached want: every record is in (or counted twice somewhere). It
// judges only once every job completed a checkpoint in this run, which
// follows its undo: before, the table may still hold the killed run's
// writes that undo is about to remove.
func stopWhenComplete(tbl *aggmerge.Table, want int64, jobs []*runtime.Job, regs []*prometheus.Registry, mode string) {
	for _, reg := range regs {
		for checkpointsDone(reg) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if mode == modeWindow {
		want := crashWindowsLeft(uint64(want))
		for sameRows(windowTable(tbl), want) != nil {
			time.Sleep(50 * time.Millisecond)
		}
		for _, j := range jobs {
			j.Stop()
		}
		return
	}
	for {
		var n, n2 int64
		_ = tbl.Scan(func(r aggmerge.Row) error {
			a, b := eventsIn(mode, r)
			n, n2 = n+a, n2+b
			return nil
		})
		if n >= want && n2 >= want {
			for _, j := range jobs {
				j.Stop()
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type harness struct {
	t       *testing.T
	seed    int64
	dir     string
	brokers []string
	topic   string
	par     int
	mode    string
	extra   []string
}

func (h *harness) start(extra ...string) *crashtest.Child {
	env := append([]string{crashEnv + "=" + h.dir, crashEnv + "_PAR=" + strconv.Itoa(h.par),
		crashEnv + "_BROKERS=" + strings.Join(h.brokers, ","), crashEnv + "_TOPIC=" + h.topic,
		crashEnv + "_MODE=" + h.mode, crashEnv + "_SEED=" + strconv.FormatInt(h.seed, 10)}, h.extra...)
	return crashtest.Start(h.t, append(env, extra...)...)
}

// produce writes events [from, to) as JSON, each key to its own partition.
func produce(t *testing.T, cl *kgo.Client, topic string, from, to uint64) {
	recs := make([]*kgo.Record, 0, to-from)
	for seq := from; seq < to; seq++ {
		v, _ := json.Marshal(operators.Event{Seq: seq, Key: seq % keys, Value: operators.ValueOf(seq), Time: crashTime(seq)})
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(seq % keys % crashParts), Value: v})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// run kills the child *killsFlag times at random moments while the second
// half of the input is produced, optionally restores an older checkpoint
// half way, then lets the last run finish and checks the table.
func (h *harness) run(olderCheckpoint bool) {
	t := h.t
	rng := rand.New(rand.NewSource(h.seed))
	producer := kafkatest.Client(t, h.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(t, producer, h.topic, 0, crashCount/2)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for from := uint64(crashCount / 2); from < crashCount; from += 500 {
			produce(t, producer, h.topic, from, from+500)
			time.Sleep(100 * time.Millisecond) // 5k records/s: about as long as the kills
		}
	}()
	kills := *killsFlag
	for k := 0; k < kills; k++ {
		var extra []string
		if olderCheckpoint && k == kills/2 {
			extra = h.olderCheckpoints()
		}
		if k%2 == 1 {
			// Synced table writes survive the kill: undo has the most to do.
			// Unsynced, a kill loses the WAL's tail past the last checkpoint.
			extra = append(extra, crashEnv+"_SYNC=1")
		}
		killed, err := h.start(extra...).KillAfter(time.Duration(50+rng.Intn(400)) * time.Millisecond)
		if !killed {
			t.Fatalf("seed %d: child ended before kill %d: %v", h.seed, k, err)
		}
	}
	<-produced
	if err := h.start(crashEnv + "_FINAL=" + strconv.Itoa(crashCount)).Wait(90 * time.Second); err != nil {
		t.Fatalf("seed %d: final run: %v", h.seed, err)
	}
}

// olderCheckpoints asks the next run to restore, for every job, the oldest
// checkpoint it retains instead of the latest.
func (h *harness) olderCheckpoints() []string {
	var env []string
	for name := range jobsOf(h.mode) {
		s, err := state.OpenStorage(filepath.Join(h.dir, "jobs", name, "checkpoints"))
		if err != nil {
			h.t.Fatal(err)
		}
		cps, err := s.List()
		if err != nil {
			h.t.Fatal(err)
		}
		var done []state.Checkpoint
		for _, c := range cps {
			if c.Completed {
				done = append(done, c)
			}
		}
		if len(done) < 2 {
			h.t.Logf("job %s retains %d checkpoints: restoring the latest", name, len(done))
			continue
		}
		h.t.Logf("job %s: restoring the older checkpoint %s (newest %s)", name, done[0].Name, done[len(done)-1].Name)
		env = append(env, fmt.Sprintf("%s_RESTORE_%s=%d", crashEnv, name, done[0].ID))
	}
	return env
}

func (h *harness) table() *aggmerge.Table {
	tbl, err := aggmerge.Open(filepath.Join(h.dir, "table"), aggmerge.Schema{}, aggmerge.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { tbl.Close() })
	return tbl
}

func newHarness(t *testing.T, par int, mode string, extra ...string) *harness {
	seed := crashtest.Seed(t, *seedFlag)
	brokers := kafkatest.Brokers(t)
	return &harness{t: t, seed: seed, dir: t.TempDir(), brokers: brokers,
		topic: kafkatest.NewTopic(t, brokers, crashParts), par: par, mode: mode, extra: extra}
}

// TestCrashHarness kills the writing process at random moments, mid-batch,
// during checkpoints and during undo, while input keeps arriving: every row
// must equal the exact aggregate of the input, and the log replayed must
// equal the table.
func TestCrashHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a job process many times")
	}
	for _, tc := range []struct {
		name  string
		par   int
		mode  string
		older bool
	}{
		{"one-job/p=2", 2, "one", false},
		{"one-job/no-combine", 2, "one", false},
		{"one-job/flush-at-checkpoint", 2, "one", false},
		{"older-checkpoint/flush-at-checkpoint", 1, "one", true},
		{"two-jobs-disjoint-columns", 2, "two", false},
		{"older-checkpoint", 1, "one", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var extra []string
			if strings.Contains(tc.name, "no-combine") {
				extra = append(extra, crashEnv+"_NOCOMBINE=1")
			}
			if strings.Contains(tc.name, "flush-at-checkpoint") {
				extra = append(extra, crashEnv+"_FLUSH=checkpoint")
			}
			h := newHarness(t, tc.par, tc.mode, extra...)
			h.run(tc.older)
			checkTable(t, h.table(), expected(crashCount))
		})
	}
}

// TestCrashHarnessBites: with undo switched off the same harness must find
// double counts.
func TestCrashHarnessBites(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a job process many times")
	}
	h := newHarness(t, 2, "one", crashEnv+"_SKIPUNDO=1")
	h.run(false)
	want := expected(crashCount)
	wrong := 0
	_ = h.table().Scan(func(r aggmerge.Row) error {
		if fmt.Sprint(format(r.Values)) != fmt.Sprint(want[r.Key[0].Int()]) {
			wrong++
		}
		return nil
	})
	if wrong == 0 {
		t.Fatalf("seed %d: undo off and %d kills, yet the table is exact: the harness cannot see double counting", h.seed, *killsFlag)
	}
	t.Logf("seed %d: %d of %d rows wrong without undo, as expected", h.seed, wrong, len(want))
}
