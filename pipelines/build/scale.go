package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
	"github.com/ebbflow/ebbflow/sink/aggmerge/repartition"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// scaled wires instance job.scale.instance of a scaled job
// (docs/SCALING.md): stage 1 runs beside the runtime job, reading the
// input as a member of the group <job>.scale and sending the mapped rows to
// the repartition topic in one transaction per checkpoint interval; the
// runtime job is stage 2, the reader of the owned repartition partitions
// feeding the table's exactly-once writer. The validation admitted one
// Kafka source of plain records and one table sink.
func (e *Env) scaled(j *Job) error {
	p := j.p
	sc := p.Spec.Job.Scale
	k := p.Spec.Sources[0].Kafka
	cfg, err := e.writerConfig(j, 0)
	if err != nil {
		return err
	}
	codec, err := repartition.NewCodec(cfg.Table, p.Spec.Job.Name, cfg.Columns)
	if err != nil {
		return err
	}
	conn, err := e.KafkaConnection(k.Connection)
	if err != nil {
		return err
	}
	topic, buckets := p.RepartitionTopic(), codec.Buckets()
	off, err := NewOffline(p)
	if err != nil {
		return err
	}
	send := codec.Sender(func(r *kgo.Record, w *writer.Row) (bool, error) {
		row, err := off.Decode(0, r)
		if err != nil {
			return false, fmt.Errorf("decode: %w", err)
		}
		if keep, err := off.Transform(row); !keep || err != nil {
			return false, err
		}
		return true, off.Write(0, row, w)
	})
	stage1 := repartition.NewStatus()
	j.scale = &ScaleState{Instance: sc.Instance, Instances: sc.Instances, RepartitionTopic: topic, Of: buckets, stage1: stage1}
	metrics, err := repartition.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"job": p.Spec.Job.Name}, e.opts.Registerer))
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	onError, err := kafka.ParseErrorPolicy(string(k.OnError))
	if err != nil {
		return err
	}
	every := p.Spec.Checkpoint.Interval.Std()
	if every <= 0 {
		every = time.Second
	}
	wcfg := repartition.WriterConfig{Kafka: conn, Group: p.Spec.Job.Name + ".scale", Input: k.Topics,
		Topic: topic, Buckets: buckets, TransactionalID: fmt.Sprintf("ebbflow-%s-%s-repartition-%d", p.Spec.Job.Name, p.Tables[0].Spec.Name, sc.Instance),
		InstanceID:         fmt.Sprintf("%s-%d", p.Spec.Job.Name, sc.Instance),
		TransactionTimeout: max(time.Minute, 3*every), // the broker allows 15 minutes by default
		SessionTimeout:     sc.SessionTimeout.Std(),
		Logger:             e.log.With("job", p.Spec.Job.Name, "stage", 1), Metrics: metrics, Status: stage1,
		OnError: onError, DeadLetterTopic: k.DeadLetterTopic}
	if sc.Owner != "" {
		// The owner job's instances tell its rows by their headers (the
		// owner's own rows go without).
		wcfg.Headers = codec.Headers()
	}
	run1 := func(ctx context.Context) error { return repartition.Run(ctx, wcfg, every, send) }
	if sc.Owner != "" {
		// Its rows are applied by the owner job's instances.
		j.stage1 = newStage1Only(run1, stage1)
		return nil
	}
	j.side = append(j.side, run1)
	writers, err := e.stage2Writers(p, repartition.JobWriter{Codec: codec, Sink: p.Spec.Sinks[0].Name, Config: cfg})
	if err != nil {
		return err
	}
	router, err := repartition.NewRouter(metrics, writers...)
	if err != nil {
		return err
	}
	if sc.Ownership == pipelines.OwnershipGroup {
		return e.dynamic(j, conn, router, cfg.Table, metrics, onError)
	}
	owned := repartition.Owned(buckets, sc.Instance, sc.Instances)
	j.scale.Buckets = OwnedBuckets(sc, buckets)
	metrics.Owned(len(owned))
	src, err := repartition.NewSource(repartition.SourceConfig{Kafka: conn, Topic: topic,
		Owned: owned, OnError: onError, DeadLetterTopic: k.DeadLetterTopic}, router)
	if err != nil {
		return err
	}
	j.sources = append(j.sources, src)
	return router.AddWriters(runtime.FromSource(j.rt, "repartition", src.New))
}

// stage2Writers returns the writers of the owner job p's stage 2: its own,
// then one for each loaded job that writes into p's table
// (job.scale.owner), of that job's columns and table sink, named by it.
func (e *Env) stage2Writers(p *pipelines.Pipeline, own repartition.JobWriter) ([]repartition.JobWriter, error) {
	writers := []repartition.JobWriter{own}
	for _, q := range e.loaded {
		if sc := q.Spec.Job.Scale; sc == nil || sc.Owner != p.Spec.Job.Name {
			continue
		}
		cfg, err := e.writerConfigOf(q, 0)
		if err != nil {
			return nil, err
		}
		codec, err := repartition.NewCodec(cfg.Table, q.Spec.Job.Name, cfg.Columns)
		if err != nil {
			return nil, err
		}
		writers = append(writers, repartition.JobWriter{Codec: codec, Sink: q.Spec.Sinks[0].Name, Config: cfg})
	}
	return writers, nil
}

// stage1Only is a job that writes into its owner job's table: its stage 1
// is all of it, stopped by Stop (a final commit) or its context.
type stage1Only struct {
	run1   func(context.Context) error
	status *repartition.Status
	once   sync.Once
	stopCh chan struct{}
}

func newStage1Only(run func(context.Context) error, status *repartition.Status) *stage1Only {
	return &stage1Only{run1: run, status: status, stopCh: make(chan struct{})}
}

func (s *stage1Only) stop() { s.once.Do(func() { close(s.stopCh) }) }

// run runs stage 1 until Stop or ctx ends.
func (s *stage1Only) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-s.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := s.run1(ctx)
	cancel()
	<-stopped
	return err
}

// dynamicStage2 is stage 2 of a scaled job with ownership group: the
// owners group's assignment, and the incarnation of stage 2 that applies
// it now (repartition.Owners).
type dynamicStage2 struct {
	owners *repartition.Owners
	mu     struct {
		sync.Mutex
		rt  *runtime.Job
		src healthChecker
	}
}

func (d *dynamicStage2) current() *runtime.Job {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.rt
}

func (d *dynamicStage2) sources() []healthChecker {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.src == nil {
		return nil
	}
	return []healthChecker{d.mu.src}
}

// dynamic wires stage 2 under dynamic ownership (docs/SCALING.md,
// "Dynamic ownership"): each assignment of the group <job>.owners starts
// an incarnation of stage 2, a runtime job like the static one over the
// partitions assigned, each read from its handover's resume offset. The
// first incarnation restores the run's restore point; the later ones the
// latest checkpoint, the previous incarnation's final one.
func (e *Env) dynamic(j *Job, conn kafka.Connection, router *repartition.Router, table *aggmerge.Table, metrics *repartition.Metrics, onError kafka.ErrorPolicy) error {
	p := j.p
	k := p.Spec.Sources[0].Kafka
	sc := p.Spec.Job.Scale
	topic := p.RepartitionTopic()
	d := &dynamicStage2{}
	d.mu.rt = j.rt
	first := true
	stage2 := func(owned []int32, resume map[int32]int64, positions *kafka.Positions) (repartition.Stage2, error) {
		opts := j.opts
		if !first {
			opts.Restore = runtime.RestoreLatest
		}
		rt := j.rt
		if !first {
			rt = runtime.NewJob(opts)
		}
		first = false
		src, err := repartition.NewSource(repartition.SourceConfig{Kafka: conn, Topic: topic, Owned: owned,
			Resume: resume, ResumeOnRestore: true, Positions: positions, OnError: onError, DeadLetterTopic: k.DeadLetterTopic}, router)
		if err != nil {
			return nil, err
		}
		if err := router.AddWriters(runtime.FromSource(rt, "repartition", src.New)); err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.mu.rt, d.mu.src = rt, src
		d.mu.Unlock()
		return rt, nil
	}
	owner := repartition.OwnerConfig{Kafka: conn, Topic: topic, Owner: fmt.Sprintf("%s/%s#%d", p.Spec.Job.Name, p.Tables[0].Spec.Name, sc.Instance)}
	if e.opts.UnsafeOwnerLogIDPerInstance {
		owner.TransactionalID = fmt.Sprintf("%s-owner-i%d", topic, sc.Instance)
	}
	var changelog *repartition.Changelog
	if cl := p.Tables[0].Spec.Changelog; cl != nil {
		// On the source's cluster (validated): written in the owner
		// log's transactions.
		changelog = &repartition.Changelog{Table: p.Tables[0].Spec.Name, Topic: cl.Topic, Format: export.Format(cl.Format)}
		e.log.Info("changelog written by the bucket owners", "table", changelog.Table, "topic", cl.Topic, "format", cl.Format)
	}
	d.owners = repartition.NewOwners(repartition.OwnersConfig{
		Owner: owner,
		Table: table, Group: p.Spec.Job.Name + ".owners", SessionTimeout: sc.SessionTimeout.Std(), Writers: router.Groups(),
		Changelog: changelog,
		Stage2:    stage2, Logger: e.log.With("job", p.Spec.Job.Name, "stage", 2), Metrics: metrics})
	j.dyn = d
	j.scale.owned = d.owners.Owned
	return nil
}

// scaleLayout is what a data directory records of the scaled job it runs:
// which buckets its table holds.
type scaleLayout struct {
	Mode      string `json:"mode"`
	Instance  int    `json:"instance"`
	Instances int    `json:"instances"`
	Topic     string `json:"repartition_topic"`
	// Ownership is "group" for dynamic ownership; empty: static (as
	// files written before it say).
	Ownership string `json:"ownership,omitempty"`
}

func (l scaleLayout) String() string {
	if l.Ownership == string(pipelines.OwnershipGroup) {
		return fmt.Sprintf("instance %d with ownership group (repartition topic %s)", l.Instance, l.Topic)
	}
	return fmt.Sprintf("instance %d of %d (repartition topic %s)", l.Instance, l.Instances, l.Topic)
}

// scaleFile holds the scaleLayout of a job in a data directory.
func scaleFile(dataDir, job string) string {
	return filepath.Join(filepath.Dir(CheckpointDir(dataDir, job)), "scale.json")
}

// checkScale refuses to run a job on a data directory whose table holds
// other buckets than the job would apply: a scaled instance on the
// checkpoints of a single-process run (the input would be counted again
// on top of the table), a single process on an instance's data, or an
// instance whose number, count or topic changed (its buckets would move,
// which needs failover). A scaled job records its layout on its first
// start.
func (e *Env) checkScale(j *Job) error {
	p := j.p
	path := scaleFile(e.opts.DataDir, p.Spec.Job.Name)
	var had *scaleLayout
	switch b, err := os.ReadFile(path); {
	case err == nil:
		had = new(scaleLayout)
		if err := json.Unmarshal(b, had); err != nil {
			return fmt.Errorf("%s: %w: %v", path, state.ErrCorrupt, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read %s: %w", path, err)
	}
	sc := p.Spec.Job.Scale
	if sc == nil {
		if had != nil {
			return fmt.Errorf("%w: %s: the data directory holds %s of job %q scaled over Kafka, and the file runs it in one process without job.scale: "+
				"its table holds only that instance's buckets; run it with the same job.scale, or use a new data directory",
				runtime.ErrRestore, path, had, p.Spec.Job.Name)
		}
		return nil
	}
	now := scaleLayout{Mode: string(sc.Mode), Instance: sc.Instance, Instances: sc.Instances, Topic: p.RepartitionTopic()}
	if sc.Ownership == pipelines.OwnershipGroup {
		now.Ownership, now.Instances = string(sc.Ownership), 0 // any number of instances
	}
	switch {
	case had == nil && j.startAny:
		return fmt.Errorf("%w: job %q has checkpoints of a run without job.scale in %s: a scaled instance cannot take over that table "+
			"(its input would be counted again on top of it); use a new data directory",
			runtime.ErrRestore, p.Spec.Job.Name, CheckpointDir(e.opts.DataDir, p.Spec.Job.Name))
	case had != nil && *had != now:
		return fmt.Errorf("%w: %s: the data directory holds %s, and the file asks for %s: "+
			"moving buckets between instances needs failover, ownership group, from its first run on (docs/SCALING.md); run it as before, or use a new data directory",
			runtime.ErrRestore, path, had, now)
	case had == nil:
		if err := state.MkdirSync(filepath.Dir(path)); err != nil {
			return err
		}
		_, _, err := state.WriteFileAtomic(path, func(w io.Writer) error { return json.NewEncoder(w).Encode(now) })
		return err
	}
	return nil
}
