package build

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
	"github.com/ebbflow/ebbflow/state/pebblestate"
)

// Row is a record inside a job built from a file.
type Row = pipelines.Row

// Job is a job built from a file, with the producers of its datagen
// sources that write into a topic.
type Job struct {
	p         *pipelines.Pipeline
	rt        *runtime.Job
	sources   []healthChecker // the Kafka sources
	producers []*producer
	// side runs beside the runtime job: stage 1 of a scaled job.
	side []func(context.Context) error
	// scale is what a scaled job's instance owns (nil: not scaled).
	scale *ScaleState
	// dyn runs stage 2 of a scaled job with dynamic ownership in
	// incarnations (nil: rt is the job).
	dyn *dynamicStage2
	// stage1 is the whole job of one that writes into its owner job's
	// table (job.scale.owner): it has no stage 2 (nil: rt is the job).
	stage1 *stage1Only
	// startAny: the data directory held checkpoints of the job when it
	// was built (it restores them).
	startAny bool
	opts     runtime.Options // rt's
}

// healthChecker is a Kafka source of any record type.
type healthChecker interface{ Healthy() (bool, string) }

// Build makes the runtime job of p. OpenTables must have opened its tables.
func (e *Env) Build(p *pipelines.Pipeline, restore runtime.RestorePoint) (*Job, error) {
	opts := p.Spec.RuntimeOptions()
	opts.DataDir = e.opts.DataDir
	opts.Logger = e.log
	opts.Registerer = e.opts.Registerer
	opts.Restore = restore
	if keyedWindows(p) {
		// The open windows of a final table can be many: their partials
		// live in pebble, not in memory.
		opts.StateBackend = pebblestate.NewFactory(pebblestate.Options{Logger: e.log})
	}
	if l := e.opts.Listener; l != nil {
		opts.Listener = func(ev runtime.Event) { l(p.Spec.Job.Name, ev) }
	}
	j := &Job{p: p, rt: runtime.NewJob(opts), opts: opts}
	if cps, err := ListCheckpoints(e.opts.DataDir, p.Spec.Job.Name); err == nil && len(cps) > 0 {
		j.startAny = true
	}
	if err := e.checkScale(j); err != nil {
		return nil, fmt.Errorf("job %q: %w", p.Spec.Job.Name, err)
	}
	if p.Spec.Job.Scale != nil {
		if err := e.scaled(j); err != nil {
			return nil, fmt.Errorf("job %q: scale: %w", p.Spec.Job.Name, err)
		}
		return j, nil
	}
	var streams []runtime.Stream[Row]
	for i := range p.Spec.Sources {
		s, err := e.input(j, i)
		if err != nil {
			return nil, fmt.Errorf("job %q source %q: %w", p.Spec.Job.Name, p.Spec.Sources[i].Name, err)
		}
		streams = append(streams, s)
	}
	out := streams[0]
	if len(streams) > 1 {
		out = runtime.Union("union", streams...)
	}
	out, err := dedupe(p, out)
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", p.Spec.Job.Name, err)
	}
	for i, s := range p.Spec.Sinks {
		wire, err := wiringOf(sinkWiring, pipelines.RoleSink, s.Kind())
		if err == nil {
			err = wire(e, j, i, out)
		}
		if err != nil {
			return nil, fmt.Errorf("job %q sink %q: %w", p.Spec.Job.Name, s.Name, err)
		}
	}
	return j, nil
}

// The wiring of each kind of component that pipelines registers
// (pipelines.Components), by name: a source adds its records and its
// "<source>-transforms" operator to the job and returns the transformed
// stream; a sink consumes the job's stream. Transforms need none: they run
// in each source's transforms operator (pipelines.Transformer).
var (
	sourceWiring = map[string]func(e *Env, j *Job, i int) (runtime.Stream[Row], error){
		"kafka":   (*Env).kafkaInput,
		"datagen": (*Env).datagenInput,
	}
	sinkWiring = map[string]func(e *Env, j *Job, i int, in runtime.Stream[Row]) error{
		"table": (*Env).tableSink,
	}
)

// wiringOf returns the wiring of a kind of component, or an error naming
// the kinds that have one.
func wiringOf[W any](wirings map[string]W, role pipelines.Role, kind string) (W, error) {
	w, ok := wirings[kind]
	if !ok {
		return w, fmt.Errorf("no wiring for %s kind %q (wired: %s)", role, kind, strings.Join(slices.Sorted(maps.Keys(wirings)), ", "))
	}
	return w, nil
}

// input adds source i of the job and its transforms, and returns the
// transformed stream.
func (e *Env) input(j *Job, i int) (runtime.Stream[Row], error) {
	if subtasks, row, ok := j.p.RegisteredSource(i); ok {
		return registeredInput(j, i, subtasks, row), nil
	}
	wire, err := wiringOf(sourceWiring, pipelines.RoleSource, j.p.Spec.Sources[i].Kind())
	if err != nil {
		return runtime.Stream[Row]{}, err
	}
	return wire(e, j, i)
}

// kafkaInput adds Kafka source i of the job and its transforms.
func (e *Env) kafkaInput(j *Job, i int) (runtime.Stream[Row], error) {
	p := j.p
	name := p.Spec.Sources[i].Name
	k := p.Spec.Sources[i].Kafka
	if k.Format.Changelog() {
		changes, policy, err := e.changelogSource(j, name, k)
		if err != nil {
			return runtime.Stream[Row]{}, err
		}
		return runtime.Apply(changes, name+"-transforms", func() runtime.Operator[kafka.Change, Row] { return newChangeOp(p, policy) }), nil
	}
	recs, policy, err := e.kafkaRows(j, name, k)
	if err != nil {
		return runtime.Stream[Row]{}, err
	}
	return runtime.Apply(recs, name+"-transforms", func() runtime.Operator[fromKafka, Row] { return kafkaRowOp{newTransformOp(p, policy)} }), nil
}

// datagenInput adds datagen source i of the job and its transforms.
func (e *Env) datagenInput(j *Job, i int) (runtime.Stream[Row], error) {
	p := j.p
	s, err := e.datagen(j, i)
	if err != nil {
		return runtime.Stream[Row]{}, err
	}
	return runtime.Apply(s, p.Spec.Sources[i].Name+"-transforms", func() runtime.Operator[Row, Row] { return newTransformOp(p, &errorPolicy{}) }), nil
}

// registeredInput adds source i of the job, of a kind registered from Go
// (pipelines.RegisterSource), and its transforms: each record's values are
// placed in a Row, then transformed as a datagen's are.
func registeredInput(j *Job, i int, subtasks func() runtime.Source[[]any], row func([]any) (Row, error)) runtime.Stream[Row] {
	p := j.p
	name := p.Spec.Sources[i].Name
	s := runtime.FromSource(j.rt, name, subtasks)
	return runtime.Apply(s, name+"-transforms", func() runtime.Operator[[]any, Row] {
		return valuesOp{newTransformOp(p, &errorPolicy{}), row}
	})
}

// tableSink adds table sink i of the job: the exactly-once writer of its
// table, fed with in.
func (e *Env) tableSink(j *Job, i int, in runtime.Stream[Row]) error {
	cfg, err := e.writerConfig(j, i)
	if err != nil {
		return err
	}
	p, t := j.p, j.p.Tables[i]
	if w := t.Window; w != nil && w.Watermarked() {
		return windowSink(e, p, i, t, cfg.Table, cfg, in)
	}
	if w := t.Window; w != nil && w.Expanded() {
		cfg.Window = &writer.Window{Size: w.Size, Slide: w.Slide, Retain: w.Retain}
		return writer.To(in, p.Spec.Sinks[i].Name, cfg, expandingMapper(p, t))
	}
	return writer.To(in, p.Spec.Sinks[i].Name, cfg, mapper(p, t))
}

// writerConfig is the exactly-once writer's configuration of table sink i.
func (e *Env) writerConfig(j *Job, i int) (writer.Config, error) {
	return e.writerConfigOf(j.p, i)
}

// writerConfigOf is the exactly-once writer of p's table sink i.
func (e *Env) writerConfigOf(p *pipelines.Pipeline, i int) (writer.Config, error) {
	t := p.Tables[i]
	table, ok := e.tables[t.Spec.Name]
	if !ok {
		return writer.Config{}, fmt.Errorf("table %q is not open", t.Spec.Name)
	}
	cols := make([]string, len(t.Columns))
	for k, c := range t.Columns {
		cols[k] = c.Name
	}
	// The log is truncated below what the sink's retained checkpoints and
	// the changelog exporter (whose hold OpenTables placed) still need.
	return writer.Config{Table: table, Columns: cols, Retracts: p.KindSlot >= 0, TruncateLog: true,
		FlushInterval: flushInterval(t.Spec.FlushInterval), UnsafeSkipUndo: e.opts.UnsafeSkipUndo}, nil
}

// flushInterval is the writer's FlushInterval of a table sink's.
func flushInterval(f pipelines.FlushInterval) time.Duration {
	if f == pipelines.FlushAtCheckpoint {
		return writer.FlushAtCheckpoint
	}
	return time.Duration(f)
}

// datagen adds datagen source i of the job: straight into the job, or
// through its topic.
func (e *Env) datagen(j *Job, i int) (runtime.Stream[Row], error) {
	p := j.p
	src := &p.Spec.Sources[i]
	d := src.Datagen
	gen, err := p.NewGenerator(i)
	if err != nil {
		return runtime.Stream[Row]{}, err
	}
	if d.Topic == "" {
		return runtime.FromSource(j.rt, src.Name, newGenSource(gen, d)), nil
	}
	conn, err := e.KafkaConnection(d.Kafka)
	if err != nil {
		return runtime.Stream[Row]{}, err
	}
	j.producers = append(j.producers, &producer{gen: gen, rows: p.NewRowBuilder(), spec: d, conn: conn,
		partitions: p.Spec.Job.Parallelism, log: e.log.With("job", p.Spec.Job.Name, "source", src.Name, "topic", d.Topic)})
	cfg := kafka.Config{Connection: conn, Topics: []string{d.Topic}, Start: kafka.StartEarliest(), Group: p.Spec.Job.Name}
	ks, err := kafka.NewSource(cfg, kafka.JSONWith(p.NewRowBuilder().FromJSON))
	if err != nil {
		return runtime.Stream[Row]{}, err
	}
	j.sources = append(j.sources, ks)
	return runtime.FromSource(j.rt, src.Name, ks.New), nil
}

// kafkaRows adds a Kafka source of plain records (format json or raw) and
// returns its rows, each with its record, and the policy for rows that
// fail.
func (e *Env) kafkaRows(j *Job, name string, k *pipelines.KafkaSource) (runtime.Stream[fromKafka], *errorPolicy, error) {
	cfg, policy, err := e.kafkaSource(k)
	if err != nil {
		return runtime.Stream[fromKafka]{}, nil, err
	}
	rows := rowFormat(j.p, k)
	format := func() kafka.Decoder[fromKafka] {
		dec := rows()
		return func(r *kgo.Record) (fromKafka, error) {
			row, err := dec(r)
			return fromKafka{row: row, rec: r}, err
		}
	}
	var opts []kafka.Option[fromKafka]
	if et := k.EventTime; et != nil && et.Field != "" {
		f, ok := j.p.Input.Field(et.Field)
		if !ok {
			return runtime.Stream[fromKafka]{}, nil, fmt.Errorf("event time: no field %q", et.Field)
		}
		opts = append(opts, kafka.Timestamp(func(_ *kgo.Record, v fromKafka) (int64, error) { return eventTimeOf(v.row[f.Slot], f.Name) }))
	}
	if vs := j.p.Spec.Versions; vs.By == pipelines.VersionsByEventTime {
		// The checkpoints, and so the versions, are cut on event-time
		// boundaries.
		if cfg.Cuts, err = kafka.NewCuts(vs.Every.Std()); err != nil {
			return runtime.Stream[fromKafka]{}, nil, err
		}
		e.addCuts(j.Name(), cfg.Cuts)
	}
	ks, err := kafka.NewSource(cfg, format, opts...)
	if err != nil {
		return runtime.Stream[fromKafka]{}, nil, err
	}
	j.sources = append(j.sources, ks)
	return runtime.FromSource(j.rt, name, ks.New), policy, nil
}

// rowFormat decodes the records of a Kafka source of plain records (format
// json or raw) into rows of p.
func rowFormat(p *pipelines.Pipeline, k *pipelines.KafkaSource) kafka.Format[Row] {
	rows := p.NewRowBuilder()
	if k.Format == pipelines.FormatRaw {
		return func() kafka.Decoder[Row] {
			return func(r *kgo.Record) (Row, error) { return rows.FromRaw(r.Key, r.Value) }
		}
	}
	return kafka.JSONWith(rows.FromJSON)
}

// eventTimeOf reads the event time of a record from its field: a
// timestamp, or an int64 of Unix milliseconds.
func eventTimeOf(v any, field string) (int64, error) {
	switch t := v.(type) {
	case time.Time:
		return watermark.FromTime(t), nil
	case int64:
		return watermark.FromMillis(t), nil
	case nil:
		return 0, fmt.Errorf("field %s is null", field)
	}
	return 0, fmt.Errorf("field %s holds a %T, not a time", field, v)
}

// kafkaSource maps a Kafka source of a job file to the Kafka package's
// configuration and the policy for records that fail.
func (e *Env) kafkaSource(k *pipelines.KafkaSource) (kafka.Config, *errorPolicy, error) {
	conn, err := e.KafkaConnection(k.Connection)
	if err != nil {
		return kafka.Config{}, nil, err
	}
	cfg := kafka.Config{Connection: conn}
	cfg.Topics, cfg.TopicPattern, cfg.Group, cfg.DeadLetterTopic = k.Topics, k.TopicPattern, k.Group, k.DeadLetterTopic
	cfg.ReadUncommitted = k.IsolationLevel == "read_uncommitted"
	cfg.Bounded = k.Bounded
	cfg.DiscoveryInterval = k.Discovery.Std()
	if cfg.DiscoveryInterval == 0 {
		cfg.DiscoveryInterval = -1 // 0s in a file: never
	}
	if cfg.Start, err = kafka.ParseStartPosition(string(k.StartOffset)); err != nil {
		return cfg, nil, err
	}
	if cfg.OnDecodeError, err = kafka.ParseErrorPolicy(string(k.OnError)); err != nil {
		return cfg, nil, err
	}
	cfg.ClientOptions = []kgo.Opt{kgo.FetchMaxBytes(int32(min(int64(k.FetchMaxBytes), 1<<31-1)))}
	if et := k.EventTime; et != nil {
		cfg.EventTime = &kafka.EventTime{MaxOutOfOrderness: et.MaxOutOfOrderness.Std(), IdleTimeout: et.IdleTimeout.Std()}
	}
	policy := &errorPolicy{policy: cfg.OnDecodeError, topic: k.DeadLetterTopic}
	if policy.policy == kafka.DeadLetter {
		policy.conn = cfg.Connection
	}
	return cfg, policy, nil
}

// keyedWindows reports whether a table of p keeps its open windows in keyed
// state (emit: final, or session windows).
func keyedWindows(p *pipelines.Pipeline) bool {
	for _, t := range p.Tables {
		if t.Window != nil && (t.Window.Final || t.Window.Gap > 0) {
			return true
		}
	}
	return false
}

// Name returns the job's name.
func (j *Job) Name() string { return j.p.Spec.Job.Name }

// Pipeline returns the job's validated file.
func (j *Job) Pipeline() *pipelines.Pipeline { return j.p }

// Run runs the job and its datagen producers until the job ends, Stop is
// called, or ctx is cancelled; it returns when all of them have returned.
// A producer that fails ends the job with its error.
func (j *Job) Run(ctx context.Context) error {
	for _, pr := range j.producers {
		// The topic exists before the job's Kafka source looks it up, or
		// the broker might create it on that lookup with its default
		// partition count.
		if err := pr.createTopic(ctx); err != nil {
			return fmt.Errorf("job %q: datagen into topic %q: %w", j.Name(), pr.spec.Topic, err)
		}
	}
	runs := make([]func(context.Context) error, len(j.producers))
	for i, pr := range j.producers {
		runs[i] = func(ctx context.Context) error {
			if err := pr.run(ctx); err != nil {
				return fmt.Errorf("datagen into topic %q: %w", pr.spec.Topic, err)
			}
			return nil
		}
	}
	main := j.rt.Run
	switch {
	case j.dyn != nil:
		main = j.dyn.owners.Run
	case j.stage1 != nil:
		main = j.stage1.run
	}
	failed, err := runBeside(ctx, main, append(runs, j.side...))
	if failed != nil {
		return fmt.Errorf("job %q: %w", j.Name(), failed)
	}
	return err
}

// runBeside runs main with side beside it until main returns, and waits
// for side. The first side failure (one returned while main runs) cancels
// main's context and is returned as failed, recorded apart from the
// context's cause: a failure wrapping context.Canceled would otherwise read
// as a plain cancellation. err is main's.
func runBeside(ctx context.Context, main func(context.Context) error, side []func(context.Context) error) (failed, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, run := range side {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil {
				mu.Lock()
				if failed == nil && ctx.Err() == nil {
					failed = err
					cancel(err)
				}
				mu.Unlock()
			}
		}()
	}
	err = main(ctx)
	mu.Lock()
	cancel(nil)
	mu.Unlock()
	wg.Wait()
	return failed, err
}

// Stop asks the job to stop with a final checkpoint.
func (j *Job) Stop() {
	switch {
	case j.dyn != nil:
		j.dyn.owners.Stop()
	case j.stage1 != nil:
		j.stage1.stop()
	default:
		j.rt.Stop()
	}
}

// rtNow returns the runtime job running now: rt, or stage 2's current
// incarnation.
func (j *Job) rtNow() *runtime.Job {
	if j.dyn != nil {
		return j.dyn.current()
	}
	return j.rt
}

// Healthy reports whether every Kafka source reaches its brokers, and
// stage 1 of a scaled job runs without a failure.
func (j *Job) Healthy() (bool, string) {
	var bad []string
	sources := j.sources
	if j.dyn != nil {
		sources = append(slices.Clone(sources), j.dyn.sources()...)
	}
	for _, s := range sources {
		if ok, msg := s.Healthy(); !ok {
			bad = append(bad, msg)
		}
	}
	if j.scale != nil {
		if ok, msg := j.scale.stage1.Health(); !ok {
			bad = append(bad, msg)
		}
	}
	if len(bad) > 0 {
		return false, strings.Join(bad, "; ")
	}
	return true, "ok"
}

// Status returns the runtime job's status (see runtime.Job.Status).
func (j *Job) Status() runtime.JobStatus { return j.rtNow().Status() }

// Edges returns the edges of the runtime job's graph (runtime.Job.Edges).
func (j *Job) Edges() []runtime.Edge { return j.rtNow().Edges() }

// Ready reports whether the job has completed a checkpoint since it began
// to run: restore and undo are then behind it and its sources read.
func (j *Job) Ready() bool {
	if j.stage1 != nil {
		return j.stage1.status.Committed()
	}
	return j.rtNow().Status().Completed > 0
}

// Restoring reports whether the job started from a data directory holding
// checkpoints (and so restores and undoes before it reads).
func (j *Job) Restoring() bool { return j.startAny }

// CheckpointDir is the checkpoint folder of a job under a data directory.
func CheckpointDir(dataDir, job string) string {
	return filepath.Join(dataDir, "jobs", job, "checkpoints")
}

// ListCheckpoints lists the checkpoint folders of a job, oldest first.
func ListCheckpoints(dataDir, job string) ([]state.Checkpoint, error) {
	s, err := state.OpenStorage(CheckpointDir(dataDir, job))
	if err != nil {
		return nil, err
	}
	return s.List()
}
