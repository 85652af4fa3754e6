package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// testOptions are set only by the tests, in TestMain of a runner child
// (see the chained crash tests): SyncTableWrites so that a SIGKILL leaves
// writes past the last checkpoint for undo, UnsafeSkipUndo to prove that
// the test detects double counting, UnsafeOwnerLogIDPerInstance to prove
// that the owner check catches a zombie owner without fencing.
var testOptions struct {
	SyncTableWrites, UnsafeSkipUndo, UnsafeOwnerLogIDPerInstance bool
	TableMinFreeBytes                                            uint64 // a reserve no disk has, to fill it (TestAbuseDiskFull)
}

type runFlags struct {
	files          []string
	sets           []string
	dataDir        string
	fromCheckpoint string
	resetWriter    bool
	httpAddress    string
	logLevel       string
	logFormat      string
	summary        time.Duration
	embeddedPort   int
	minFreeSpace   uint64
	cpuProfile     string
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run -f job.yaml [-f more.yaml]",
		Short: "Run jobs until they end or a stop (SIGTERM, SIGINT, runner stop) takes a final checkpoint",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.cpuProfile != "" {
				stop, err := startCPUProfile(f.cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return run(context.Background(), &f)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.files, "file", "f", nil, "job file (repeatable; each YAML document is one job)")
	fl.StringArrayVar(&f.sets, "set", nil, "override path=value in every job (repeatable)")
	fl.StringVar(&f.dataDir, "data-dir", "", "data directory (default: the jobs' data_dir)")
	fl.StringVar(&f.fromCheckpoint, "from-checkpoint", "latest", "latest, none (start fresh) or a checkpoint id (one job only)")
	fl.BoolVar(&f.resetWriter, "reset-writer", false, "with --from-checkpoint none: first undo everything the jobs' table writers ever wrote")
	fl.StringVar(&f.httpAddress, "http-address", "", "HTTP listen address (default: the jobs' http.address; \"off\": none)")
	fl.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (default: the jobs' logging.level)")
	fl.StringVar(&f.logFormat, "log-format", "", "text or json (default: the jobs' logging.format)")
	fl.DurationVar(&f.summary, "summary", 5*time.Second, "how often to log a summary line (0: never)")
	fl.IntVar(&f.embeddedPort, "embedded-kafka-port", 0, "port of the embedded broker on 127.0.0.1 (default: the jobs' embedded_kafka.port, else any free one)")
	fl.Uint64Var(&f.minFreeSpace, "min-free-space", 1<<30, "bytes free in the data directory below which /readyz warns")
	fl.StringVar(&f.cpuProfile, "cpu-profile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// runner is one run of the run command: its jobs, environment and server.
type runner struct {
	flags    *runFlags
	log      *slog.Logger
	reg      *prometheus.Registry
	env      *build.Env
	jobs     []*build.Job
	dataDir  string
	stopOnce sync.Once
	stopReq  chan struct{}  // closed by POST /api/v1/stop
	sigs     chan os.Signal // SIGTERM and SIGINT, caught from the start of run
	started  time.Time      // when the jobs started to run
	dash     dashboard
	mu       struct {
		sync.Mutex
		done map[string]error // jobs that returned
	}
	// topo holds the versions readers of the runner's topology (made on
	// first use).
	topo struct {
		sync.Mutex
		readers *export.VersionsReaders
	}
}

func run(ctx context.Context, f *runFlags) error {
	files, err := pipelines.ReadFiles(f.files...)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ps, err := pipelines.Load(files, pipelines.Options{Set: f.sets})
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	first := ps[0].Spec
	// Signals are caught from the start, before the data dir is locked and
	// the server answers (whoever saw either may stop the runner at once):
	// runJobs reads the first one as a stop, even one that came before the
	// jobs started.
	r := &runner{flags: f, stopReq: make(chan struct{}), sigs: make(chan os.Signal, 2)}
	signal.Notify(r.sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(r.sigs)
	r.mu.done = map[string]error{}
	if r.log, err = newLogger(first.Logging, f.logLevel, f.logFormat); err != nil {
		return err
	}
	if r.dataDir, err = dataDir(ps, f.dataDir); err != nil {
		return err
	}
	port, err := embeddedPort(ps, f.embeddedPort)
	if err != nil {
		return err
	}
	restore, err := restorePoint(f.fromCheckpoint, len(ps))
	if err != nil {
		return err
	}
	if f.resetWriter && restore != runtime.RestoreNone {
		return usageErr("--reset-writer undoes what the jobs wrote, so they must start fresh: it needs --from-checkpoint none")
	}
	if err := os.MkdirAll(r.dataDir, 0o755); err != nil {
		return fmt.Errorf("make data dir: %w", err)
	}
	unlock, err := lockDataDir(r.dataDir)
	if err != nil {
		return err
	}

	defer unlock()

	r.reg = prometheus.NewRegistry()
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(),
		freeSpaceGauge(r.dataDir))
	r.env = build.NewEnv(build.Options{DataDir: r.dataDir, Registerer: r.reg, Logger: r.log, EmbeddedPort: port,
		SyncTableWrites: testOptions.SyncTableWrites, UnsafeSkipUndo: testOptions.UnsafeSkipUndo, TableMinFreeBytes: testOptions.TableMinFreeBytes,
		UnsafeOwnerLogIDPerInstance: testOptions.UnsafeOwnerLogIDPerInstance,
		Listener:                    r.dash.listen})
	defer func() {
		if err := r.env.Close(); err != nil {
			r.log.Error("close", "err", err)
		}
	}()
	defer r.closeTopology() // before the embedded broker closes
	if err := r.env.OpenTables(ps); err != nil {
		return err
	}
	if f.resetWriter {
		if err := r.resetWriters(ps); err != nil {
			return err
		}
	}
	for _, p := range ps {
		if pipelines.WritesThroughOwner(p, ps) {
			// Its rows reach this runner through the hop: the owner's
			// stage 2 applies them; its own runner runs its stage 1.
			r.log.Info("job applied by its table's owner here", "job", p.Spec.Job.Name, "owner", p.Spec.Job.Scale.Owner)
			continue
		}
		j, err := r.env.Build(p, restore)
		if err != nil {
			return err
		}
		r.jobs = append(r.jobs, j)
		r.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ebbflow_job_ready",
			Help:        "1 once the job completed a checkpoint in this run (restore and undo done), else 0.",
			ConstLabels: prometheus.Labels{"job": j.Name()}}, func() float64 {
			if j.Ready() {
				return 1
			}
			return 0
		}))
	}

	r.reg.MustRegister(newTopologyFreshness(r))
	r.started = time.Now() // before the server reads it
	addr := first.HTTP.Address
	if f.httpAddress != "" {
		addr = f.httpAddress
	}
	if addr != "" && addr != "off" {
		srv, err := r.serve(addr, first.HTTP)
		if err != nil {
			return err
		}
		defer srv.shutdown()
	}
	return lostStateHelp(r.runJobs(ctx, shutdownTimeout(ps)), r.dataDir)
}

// resetWriters undoes everything the sinks of the jobs ever wrote to their
// tables (writer.Reset), before any job starts.
func (r *runner) resetWriters(ps []*pipelines.Pipeline) error {
	for _, p := range ps {
		job := p.Spec.Job.Name
		for i, s := range p.Spec.Sinks {
			name := p.Tables[i].Spec.Name
			t, ok := r.env.Table(name)
			if !ok {
				return fmt.Errorf("job %q: table %q is not open", job, name)
			}
			res, err := writer.Reset(t, job, s.Name)
			if err != nil {
				return err
			}
			r.log.Warn("writer reset: everything the sink wrote was taken back; it starts afresh",
				"job", job, "sink", s.Name, "table", name, "writers", len(res.Writers), "rows_cleared", res.Rows)
		}
	}
	return nil
}

// lostStateHelp adds to the refusal of a table writer that has written but
// has no state to restore the ways out on this command line.
func lostStateHelp(err error, dataDir string) error {
	var lost *writer.LostStateError
	if !errors.As(err, &lost) {
		return err
	}
	job := lost.Job
	table := filepath.Base(lost.Table)
	restore := fmt.Sprintf("restore the job's checkpoints (in %s) and run without --from-checkpoint none", build.CheckpointDir(dataDir, job))
	if lost.RestoredOK {
		restore = "restore a checkpoint taken since the sink was added (--from-checkpoint latest or a newer id)"
	}
	return fmt.Errorf("%w\nways out:\n"+
		"  - %s;\n"+
		"  - or undo everything job %q wrote to its tables, then start it afresh: runner run ... --from-checkpoint none --reset-writer;\n"+
		"  - or keep the rows as they are and add the input on top (only if it is not read again): runner table forget --data-dir %s --table %s --job %s",
		err, restore, job, dataDir, table, job)
}

// runJobs runs every job and the changelog exporters, and handles stop
// requests: the first signal (or POST /api/v1/stop) stops every job with a
// final checkpoint; a second signal or the shutdown timeout cancels them.
func (r *runner) runJobs(parent context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)

	exportCtx, stopExport := context.WithCancel(context.Background())
	exportDone := make(chan error, 1)
	go func() { exportDone <- r.env.RunExporters(exportCtx) }()

	var wg sync.WaitGroup
	errs := make(chan error, len(r.jobs))
	for _, j := range r.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := j.Run(ctx)
			r.mu.Lock()
			r.mu.done[j.Name()] = err
			r.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				r.log.Error("job failed", "job", j.Name(), "err", err)
				cancel(err) // one failing job ends the runner
			} else {
				r.log.Info("job ended", "job", j.Name())
			}
			errs <- err
		}()
	}
	allDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(allDone)
	}()
	stopSummary := r.summaries()
	defer stopSummary()

	var abort <-chan time.Time
	stopping, interrupted := false, false
	stopAll := func(why string) {
		stopping = true
		r.log.Info("stopping: taking a final checkpoint", "reason", why, "shutdown_timeout", timeout)
		for _, j := range r.jobs {
			j.Stop()
		}
		abort = time.After(timeout)
	}
loop:
	for {
		select {
		case <-allDone:
			break loop
		case s := <-r.sigs:
			if stopping {
				r.log.Warn("second signal: aborting; the state stays at the last checkpoint", "signal", s)
				interrupted = true
				cancel(errors.New("aborted by a second signal"))
				continue
			}
			stopAll(s.String())
		case <-r.stopReq:
			if !stopping {
				stopAll("stop requested over HTTP")
			}
		case <-abort:
			r.log.Error("shutdown timeout: aborting; the state stays at the last checkpoint", "timeout", timeout)
			cancel(fmt.Errorf("shutdown timeout %s exceeded", timeout))
		case exErr := <-exportDone:
			if exErr != nil {
				r.log.Error("changelog export failed", "err", exErr)
				cancel(exErr)
			}
			exportDone = nil
		}
	}
	if exportDone != nil && !interrupted && ctx.Err() == nil {
		exportDone = r.drainExports(exportDone, timeout)
	}
	stopExport()
	if exportDone != nil {
		if err := <-exportDone; err != nil {
			r.log.Error("changelog export failed", "err", err)
		}
	}
	close(errs)
	if interrupted {
		return &exitError{code: exitInterrupt, err: errors.New("interrupted")}
	}
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// drainExports lets the exporters publish what the jobs committed: it waits
// until they have caught up with their tables' logs, at most timeout. It
// returns exportDone, or nil when the exporters ended meanwhile.
func (r *runner) drainExports(exportDone chan error, timeout time.Duration) chan error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !r.env.ExportsCaughtUp() {
		select {
		case err := <-exportDone:
			if err != nil {
				r.log.Error("changelog export failed", "err", err)
			}
			return nil
		case <-deadline.C:
			r.log.Warn("changelog export not caught up at stop; the next start exports the rest", "waited", timeout)
			return exportDone
		case <-tick.C:
		}
	}
	r.log.Info("changelog export caught up")
	return exportDone
}

// requestStop asks every job to stop with a final checkpoint.
func (r *runner) requestStop() { r.stopOnce.Do(func() { close(r.stopReq) }) }

func shutdownTimeout(ps []*pipelines.Pipeline) time.Duration {
	var d time.Duration
	for _, p := range ps {
		d = max(d, p.Spec.ShutdownTimeout.Std())
	}
	return d
}

// dataDir is --data-dir, else the data_dir the jobs agree on.
func dataDir(ps []*pipelines.Pipeline, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	d := ps[0].Spec.DataDir
	for _, p := range ps[1:] {
		if p.Spec.DataDir != d {
			return "", usageErr("jobs %q and %q name different data_dir (%s, %s): one runner has one data directory; pass --data-dir",
				ps[0].Spec.Job.Name, p.Spec.Job.Name, d, p.Spec.DataDir)
		}
	}
	return d, nil
}

func restorePoint(s string, jobs int) (runtime.RestorePoint, error) {
	switch s {
	case "", "latest":
		return runtime.RestoreLatest, nil
	case "none":
		return runtime.RestoreNone, nil
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return runtime.RestorePoint{}, usageErr("--from-checkpoint %q: want latest, none or a checkpoint id", s)
	}
	if jobs != 1 {
		return runtime.RestorePoint{}, usageErr("--from-checkpoint %d names one job's checkpoint; %d jobs given", id, jobs)
	}
	return runtime.RestoreCheckpoint(barrier.CheckpointID(id)), nil
}

func newLogger(l pipelines.Logging, level, format string) (*slog.Logger, error) {
	if level == "" {
		level = string(l.Level)
	}
	if format == "" {
		format = string(l.Format)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErr("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, usageErr("log format %q: want text or json", format)
}

// listen opens the HTTP listener (split out so that a busy port is an
// error before any job starts).
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	return ln, nil
}

// startCPUProfile profiles the process until the returned stop is called, for
// `go tool pprof` over a whole run (benchmarks, a job that is slower than
// expected).
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "cpu profile %s: %v\n", path, err)
		}
	}, nil
}
