package build

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/embedded"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// Options configures an Env.
type Options struct {
	// DataDir holds tables/, jobs/ and, for the embedded broker, kafka/.
	DataDir string
	// Registerer receives every metric of the jobs, tables and exporters.
	Registerer prometheus.Registerer
	// Logger receives the logs (nil: discarded).
	Logger *slog.Logger
	// EmbeddedPort is the port of the embedded broker on 127.0.0.1 (0: any
	// free one).
	EmbeddedPort int
	// SyncTableWrites makes every table write durable before the writer
	// goes on (aggmerge.Options.SyncWrites): slower, but a crash then keeps
	// the writes past the last checkpoint, which undo takes back. By default
	// they are unsynced, and a kill of the process loses most of them.
	SyncTableWrites bool
	// UnsafeSkipUndo turns the table writers' undo off
	// (writer.Config.UnsafeSkipUndo). It exists for tests that prove a crash
	// test detects double counting; never set it otherwise.
	UnsafeSkipUndo bool
	// UnsafeOwnerLogIDPerInstance gives the owner log of a scaled job with
	// ownership group a transactional id per instance instead of per
	// partition, so that a new owner no longer fences the previous one. It
	// exists for the test that proves the owner check catches a zombie
	// owner without that fencing.
	UnsafeOwnerLogIDPerInstance bool
	// TableMinFreeBytes is the free space the tables keep in reserve
	// (aggmerge.Options.MinFreeBytes; 0: its default).
	TableMinFreeBytes uint64
	// Listener, if set, receives the events of every job built
	// (runtime.Options.Listener, with the job's name); it must return
	// quickly.
	Listener func(job string, ev runtime.Event)
}

// Env is what the jobs of one runner share.
type Env struct {
	opts      Options
	log       *slog.Logger
	tables    map[string]*aggmerge.Table
	order     []string              // table names, sorted
	loaded    []*pipelines.Pipeline // the jobs OpenTables opened the tables of
	exporters []changelogExport
	ups       upstreams

	// broker starts the embedded broker once, on first use; started holds
	// it once running.
	broker  func() (*embedded.Broker, error)
	started atomic.Pointer[embedded.Broker]
}

// NewEnv returns an Env; nothing is opened before OpenTables or Build.
func NewEnv(opts Options) *Env {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	e := &Env{opts: opts, log: opts.Logger, tables: map[string]*aggmerge.Table{}}
	e.ups.mu.byJob = map[string]map[string]*export.Upstream{}
	e.ups.mu.cuts = map[string]*kafka.Cuts{}
	e.broker = sync.OnceValues(func() (*embedded.Broker, error) {
		b, err := embedded.Start(embedded.Options{Port: opts.EmbeddedPort, DataDir: KafkaDir(opts.DataDir), Logger: opts.Logger})
		if err != nil {
			return nil, err
		}
		e.started.Store(b)
		e.log.Info("embedded kafka started", "brokers", b.Addrs())
		return b, nil
	})
	return e
}

// DataDir returns the data directory.
func (e *Env) DataDir() string { return e.opts.DataDir }

// TableDir is where table name lives under a data directory.
func TableDir(dataDir, name string) string { return filepath.Join(dataDir, "tables", name) }

// VersionsFile is where the versions of table name's changelog are kept
// under a data directory.
func VersionsFile(dataDir, name string) string {
	return filepath.Join(dataDir, "versions", name+".json")
}

// KafkaDir is where the embedded broker keeps its topics in a data directory.
func KafkaDir(dataDir string) string { return filepath.Join(dataDir, "kafka") }

// OpenTables opens every table the jobs write, each with its key and the
// columns of every job writing it (in job order), and makes the changelog
// exporters of the tables that have one. Call it once, with every job.
func (e *Env) OpenTables(ps []*pipelines.Pipeline) error {
	schemas := map[string]*aggmerge.Schema{}
	changelogs := map[string]*changelogSpec{}
	writers := map[string]map[string]bool{} // table -> jobs writing it
	writerIDs := map[string][]string{}      // table -> ids of the sink subtasks writing it
	var names []string
	e.ups.mu.Lock()
	e.ups.mu.want, e.ups.mu.other, e.ups.mu.topic = map[string]int{}, map[string]bool{}, map[string][]string{}
	e.ups.mu.byTime = map[string]bool{}
	for _, p := range ps {
		job := p.Spec.Job.Name
		e.ups.mu.byTime[job] = p.Spec.Versions.By == pipelines.VersionsByEventTime
		for _, s := range p.Spec.Sources {
			if s.Kafka != nil && s.Kafka.Format.Changelog() {
				e.ups.mu.want[job]++
				continue
			}
			e.ups.mu.other[job] = true
			e.ups.mu.topic[job] = append(e.ups.mu.topic[job], s.Topics()...)
		}
	}
	e.ups.mu.Unlock()
	for _, p := range ps {
		for i, t := range p.Tables {
			for k := range writerParallelism(p, ps) {
				writerIDs[t.Spec.Name] = append(writerIDs[t.Spec.Name], fmt.Sprintf("%s/%s#%d", p.Spec.Job.Name, p.Spec.Sinks[i].Name, k))
			}
		}
		for _, t := range p.Tables {
			name := t.Spec.Name
			if writers[name] == nil {
				writers[name] = map[string]bool{}
			}
			writers[name][p.Spec.Job.Name] = true
			s := schemas[name]
			if s == nil {
				s = &aggmerge.Schema{Buckets: t.Spec.Buckets, Delete: aggmerge.DeleteBehavior(t.Spec.OnDelete)}
				for _, k := range t.Key {
					s.Key = append(s.Key, aggmerge.Column{Name: k.Name, Type: k.Type})
				}
				if t.Window != nil {
					s.Key = append(s.Key, aggmerge.Column{Name: pipelines.WindowStart, Type: agg.Timestamp},
						aggmerge.Column{Name: pipelines.WindowEnd, Type: agg.Timestamp})
				}
				schemas[name] = s
				names = append(names, name)
			}
			for _, c := range t.Columns {
				if s.ValueIndex(c.Name) < 0 {
					s.Values = append(s.Values, aggmerge.Column{Name: c.Name, Type: c.Type, Func: c.Func, Params: c.Params})
				}
			}
			if cl := t.Spec.Changelog; cl != nil && changelogs[name] == nil {
				changelogs[name] = &changelogSpec{spec: cl, job: p.Spec.Job.Name, interval: p.Spec.Checkpoint.Interval.Std(), scale: p.Spec.Job.Scale}
			}
		}
	}
	e.loaded = ps
	slices.Sort(names)
	for _, name := range names {
		t, err := aggmerge.Open(TableDir(e.opts.DataDir, name), *schemas[name], aggmerge.Options{SyncWrites: e.opts.SyncTableWrites,
			MinFreeBytes: e.opts.TableMinFreeBytes})
		if err != nil {
			return err
		}
		e.tables[name] = t
		e.order = append(e.order, name)
		e.registerTable(name, t)
		e.warnStaleWriters(name, t, writers[name])
	}
	for _, name := range names {
		t := e.tables[name]
		exporterHolds, err := exporterHolders(t)
		if err != nil {
			return fmt.Errorf("table %q: %w", name, err)
		}
		cl := changelogs[name]
		if cl != nil && cl.scale != nil && cl.scale.Ownership == pipelines.OwnershipGroup {
			// The bucket owners' Publishers write it (Env.dynamic): the
			// table holds the buckets owned now, its log no exporter's.
			cl = nil
		}
		if cl == nil {
			// A changelog removed from the job must not keep the log.
			for _, h := range exporterHolds {
				if err := t.ReleaseHold(h); err != nil {
					return fmt.Errorf("table %q: release the changelog's log hold: %w", name, err)
				}
			}
			continue
		}
		deployment, err := DeploymentID(e.opts.DataDir)
		if err != nil {
			return err
		}
		id := TransactionalID(deployment, cl.job, name, cl.spec.TransactionalID)
		if cl.scale != nil && cl.spec.TransactionalID != "" {
			id = fmt.Sprintf("%s-%d", id, cl.scale.Instance) // the instances share the file, not the id
		}
		former := slices.DeleteFunc(exporterHolds, func(h string) bool { return h == id })
		conn, err := e.KafkaConnection(cl.spec.Connection)
		if err != nil {
			return fmt.Errorf("table %q changelog: %w", name, err)
		}
		xcfg := export.Config{Table: t, Name: name, Topic: cl.spec.Topic, Kafka: conn,
			TransactionalID: id, FormerTransactionalIDs: former,
			Mode: export.Mode(cl.spec.Mode), Format: export.Format(cl.spec.Format), CheckpointInterval: cl.interval,
			Writers: writerIDs[name], Upstream: e.upstream, VersionsFile: VersionsFile(e.opts.DataDir, name),
			Registerer: e.opts.Registerer, Logger: e.log}
		if sc := cl.scale; sc != nil {
			// An instance exports the buckets it owns, with versions of its
			// own: the instances share the topic (docs/SCALING.md).
			xcfg.Buckets, xcfg.VersionsTopic = OwnedBuckets(sc, t.Schema().Buckets), ScaledVersionsTopic(cl.spec.Topic, sc.Instance)
		}
		x, err := export.New(xcfg)
		if err != nil {
			return fmt.Errorf("table %q: %w", name, err)
		}
		e.exporters = append(e.exporters, changelogExport{x: x, table: t, name: name, spec: cl.spec})
		e.log.Info("changelog exported", "table", name, "topic", cl.spec.Topic, "cluster", cl.spec.Cluster(),
			"brokers", conn.Brokers, "transactional_id", id, "format", cl.spec.Format, "mode", cl.spec.Mode)
	}
	return nil
}

// exporterHolders lists the holds of changelog exporters on the table's
// log: named by a transactional id, which has no '/', unlike a writer's
// (job/sink).
func exporterHolders(t *aggmerge.Table) ([]string, error) {
	hs, err := t.Holders()
	if err != nil {
		return nil, fmt.Errorf("list the log holds: %w", err)
	}
	return slices.DeleteFunc(hs, func(h string) bool { return strings.Contains(h, "/") }), nil
}

// warnStaleWriters warns of writers registered with the table by jobs that
// are not in the files (removed or renamed): their registration still claims
// their columns and their hold keeps the table's log. They are not released
// here, as the job may only be run from other files; `runner table forget`
// releases them.
func (e *Env) warnStaleWriters(name string, t *aggmerge.Table, live map[string]bool) {
	warned := map[string]bool{}
	for _, r := range t.Writers() {
		if live[r.Job] || warned[r.Job] {
			continue
		}
		warned[r.Job] = true
		cols := strings.Join(r.Columns, ",")
		if cols == "" {
			cols = "all"
		}
		e.log.Warn("a job not in the job files is registered with the table: it claims its columns and holds the table's log",
			"table", name, "job", r.Job, "columns", cols,
			"release", fmt.Sprintf("runner table forget --table %s --job %s", name, r.Job))
	}
}

// changelogExport is a table's exporter.
type changelogExport struct {
	x     *export.Exporter
	table *aggmerge.Table
	name  string
	spec  *pipelines.Changelog
}

// ExporterStatus is where a table's changelog exporter stands.
type ExporterStatus struct {
	Table, Topic    string
	Cluster         string // "embedded" or the brokers (pipelines.Changelog.Cluster)
	Mode, Format    string
	TransactionalID string
	// LogEnds and Exported are per bucket: the table's log end and the
	// offset below which the exporter has exported or passed over every
	// entry (export.Exporter.Exported); their difference is its lag.
	LogEnds, Exported []uint64
	LastCommit        time.Time // zero before its first transaction
}

// Exporters returns the status of every changelog exporter, in table order.
func (e *Env) Exporters() []ExporterStatus {
	out := make([]ExporterStatus, 0, len(e.exporters))
	for _, ce := range e.exporters {
		out = append(out, ExporterStatus{Table: ce.name, Topic: ce.spec.Topic, Cluster: ce.spec.Cluster(), Mode: string(ce.spec.Mode),
			Format: string(ce.spec.Format), TransactionalID: ce.x.Holder(), LogEnds: ce.table.LogEnds(), Exported: ce.x.Exported(),
			LastCommit: ce.x.LastCommit()})
	}
	return out
}

type changelogSpec struct {
	spec     *pipelines.Changelog
	job      string // the job whose file declares it
	interval time.Duration
	scale    *pipelines.Scale // of the job, when scaled: it exports its buckets only
}

// registerTable adds the table's row count to the metrics.
func (e *Env) registerTable(name string, t *aggmerge.Table) {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ebbflow_table_rows", Help: "Rows in the table.",
		ConstLabels: prometheus.Labels{"table": name}}, func() float64 { return float64(t.Count()) })
	if err := e.opts.Registerer.Register(g); err != nil {
		e.log.Warn("register table metrics", "table", name, "err", err)
	}
}

// writerParallelism is the parallelism of the writers of p's table sinks
// among the jobs ps: p's, or for a job writing into its owner's table here
// (job.scale.owner), the owner's, whose stage 2 runs them.
func writerParallelism(p *pipelines.Pipeline, ps []*pipelines.Pipeline) int {
	if pipelines.WritesThroughOwner(p, ps) {
		for _, q := range ps {
			if q.Spec.Job.Name == p.Spec.Job.Scale.Owner {
				return q.Spec.Job.Parallelism
			}
		}
	}
	return p.Spec.Job.Parallelism
}

// Loaded returns the jobs whose tables OpenTables opened.
func (e *Env) Loaded() []*pipelines.Pipeline { return e.loaded }

// Table returns an open table.
func (e *Env) Table(name string) (*aggmerge.Table, bool) {
	t, ok := e.tables[name]
	return t, ok
}

// TableNames lists the open tables, sorted.
func (e *Env) TableNames() []string { return slices.Clone(e.order) }

// RunExporters runs the changelog exporters until ctx is done (nil) or one
// fails for good (its error).
func (e *Env) RunExporters(ctx context.Context) error {
	if len(e.exporters) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(e.exporters))
	for _, ce := range e.exporters {
		go func() {
			err := ce.x.Run(ctx)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var all []error
	for range e.exporters {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// ExportsCaughtUp reports whether every changelog exporter has exported, or
// passed over for good, every entry of its table's log. Once the jobs have
// stopped with a final checkpoint, that is everything they committed.
func (e *Env) ExportsCaughtUp() bool {
	for _, ce := range e.exporters {
		done := ce.x.Exported()
		for b, end := range ce.table.LogEnds() {
			if done[b] < end {
				return false
			}
		}
	}
	return true
}

// Brokers resolves a connection's brokers: none or [embedded] mean the
// embedded broker, started on first use with its data under
// <data_dir>/kafka so that topics survive a restart.
func (e *Env) Brokers(c pipelines.Connection) ([]string, error) {
	if len(c.Brokers) > 0 && !(len(c.Brokers) == 1 && c.Brokers[0] == "embedded") {
		return c.Brokers, nil
	}
	b, err := e.broker()
	if err != nil {
		return nil, err
	}
	return b.Addrs(), nil
}

// EmbeddedBrokers returns the embedded broker's addresses, or nil when it
// was not started.
func (e *Env) EmbeddedBrokers() []string {
	if b := e.started.Load(); b != nil {
		return b.Addrs()
	}
	return nil
}

// KafkaConnection maps a connection of a job file to the Kafka package's,
// starting the embedded broker when c names it.
func (e *Env) KafkaConnection(c pipelines.Connection) (kafka.Connection, error) {
	brokers, err := e.Brokers(c)
	if err != nil {
		return kafka.Connection{}, err
	}
	cfg := kafka.Connection{Brokers: brokers, ClientID: c.ClientID}
	if t := c.TLS; t != nil {
		cfg.TLS = &kafka.TLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName,
			InsecureSkipVerify: t.InsecureSkipVerify}
	}
	if s := c.SASL; s != nil {
		cfg.SASL = &kafka.SASL{Mechanism: string(s.Mechanism), Username: s.Username, Password: kafka.Secret(string(s.Password))}
	}
	return cfg, nil
}

// upstreams are the upstream trackers of the jobs' changelog sources, for
// the versions of the tables they write.
type upstreams struct {
	mu struct {
		sync.Mutex
		want  map[string]int                         // job → its changelog sources
		other map[string]bool                        // job → it has other sources
		topic map[string][]string                    // job → its other sources' Kafka topics
		byJob map[string]map[string]*export.Upstream // job → source → tracker
		cuts  map[string]*kafka.Cuts                 // job → its source's cuts (versions by event_time)
		// byTime: job → its versions are cut by event time (it has cuts
		// once built).
		byTime map[string]bool
	}
}

// addCuts records the cuts of job's source (versions by event_time).
func (e *Env) addCuts(job string, c *kafka.Cuts) {
	e.ups.mu.Lock()
	defer e.ups.mu.Unlock()
	e.ups.mu.cuts[job] = c
}

// addUpstream records the upstream tracker of a changelog source of job,
// replacing (and closing) one of an earlier build.
func (e *Env) addUpstream(job, source string, u *export.Upstream) {
	e.ups.mu.Lock()
	defer e.ups.mu.Unlock()
	if e.ups.mu.byJob[job] == nil {
		e.ups.mu.byJob[job] = map[string]*export.Upstream{}
	}
	if old := e.ups.mu.byJob[job][source]; old != nil {
		old.Close()
	}
	e.ups.mu.byJob[job][source] = u
}

// upstream is the exporters' export.UpstreamFunc: what job's sources had
// consumed at checkpoint (the upstream versions its changelog sources had
// consumed completely, and their least event time). It cannot tell (ok
// false) until every changelog source of the job is built.
func (e *Env) upstream(ctx context.Context, job string, checkpoint uint64) (export.Inputs, bool, error) {
	e.ups.mu.Lock()
	srcs := slices.Collect(maps.Values(e.ups.mu.byJob[job]))
	want, other, topics := e.ups.mu.want[job], e.ups.mu.other[job], e.ups.mu.topic[job]
	cuts, byTime := e.ups.mu.cuts[job], e.ups.mu.byTime[job]
	e.ups.mu.Unlock()
	if len(srcs) < want || (byTime && cuts == nil) {
		return export.Inputs{}, false, nil
	}
	out := export.Inputs{Changelogs: want > 0, Others: other, Sources: topics, UpstreamEventTimeMs: math.MaxInt64}
	if cuts != nil {
		ms, ok := cuts.At(barrier.CheckpointID(checkpoint))
		if !ok {
			return export.Inputs{}, false, nil
		}
		out.Cuts, out.CutMs = true, ms
	}
	for _, u := range srcs {
		in, ok, err := u.Consumed(ctx, checkpoint)
		if err != nil || !ok {
			return export.Inputs{}, false, err
		}
		out.Upstream = append(out.Upstream, in.Upstream...)
		out.UpstreamEventTimeMs = min(out.UpstreamEventTimeMs, in.UpstreamEventTimeMs)
	}
	if !out.Changelogs {
		out.UpstreamEventTimeMs = 0
	}
	return out, true, nil
}

// Close closes the tables, the upstream trackers and the embedded broker.
// Call it after every job and RunExporters returned.
func (e *Env) Close() error {
	var errs []error
	e.ups.mu.Lock()
	for _, srcs := range e.ups.mu.byJob {
		for _, u := range srcs {
			u.Close()
		}
	}
	clear(e.ups.mu.byJob)
	e.ups.mu.Unlock()
	for _, name := range e.order {
		errs = append(errs, e.tables[name].Close())
	}
	if b := e.started.Load(); b != nil {
		b.Close()
	}
	return errors.Join(errs...)
}
