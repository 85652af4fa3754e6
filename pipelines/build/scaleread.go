package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
	"github.com/ebbflow/ebbflow/sink/aggmerge/repartition"
)

// OwnedBuckets returns the buckets that instance sc.Instance of a scaled
// job applies, of a table of buckets buckets: those of the repartition
// partitions it owns (a partition per bucket), sorted.
func OwnedBuckets(sc *pipelines.Scale, buckets int) []int {
	parts := repartition.Owned(buckets, sc.Instance, sc.Instances)
	out := make([]int, len(parts))
	for i, p := range parts {
		out[i] = int(p)
	}
	return out
}

// ScaledVersionsTopic is the versions topic of instance i of a scaled
// job whose table's changelog is topic: each instance publishes the
// versions of the buckets it exports to its own ("<topic>.versions.<i>"),
// as each has its own table (export.ReadShared joins them).
func ScaledVersionsTopic(topic string, i int) string {
	return changelogfmt.VersionsTopic(topic) + "." + strconv.Itoa(i)
}

// ScaleState is what an instance of a scaled job owns, and how its stage
// 1 fares (Job.Scale).
type ScaleState struct {
	Instance, Instances int
	RepartitionTopic    string
	// Buckets are the buckets (the repartition partitions) the instance
	// owns and applies, of Of, with ownership static (OwnedBuckets says
	// which it applies now, whatever the ownership).
	Buckets []int
	Of      int
	stage1  *repartition.Status
	owned   func() []int32 // with ownership group
}

// Dynamic reports whether the buckets move between the instances
// (ownership group).
func (s *ScaleState) Dynamic() bool { return s.owned != nil }

// OwnedBuckets returns the buckets the instance applies now, sorted: with
// ownership group those the owners group assigned it (none during a
// handover).
func (s *ScaleState) OwnedBuckets() []int {
	if s.owned == nil {
		return s.Buckets
	}
	ps := s.owned()
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = int(p)
	}
	return out
}

// InputPartitions returns the input partitions the consumer group
// assigned to the instance's stage 1 now.
func (s *ScaleState) InputPartitions() map[string][]int32 { return s.stage1.Assigned() }

// Stage1Health reports whether stage 1 runs without a failure, else the
// failure it retries (repartition.Status.Health).
func (s *ScaleState) Stage1Health() (bool, string) { return s.stage1.Health() }

// Scale returns what the instance of a scaled job owns; nil for a job
// that is not scaled.
func (j *Job) Scale() *ScaleState { return j.scale }

// ScaleInfo says which part of a scaled job's table a data directory
// holds: what it recorded on the job's first start.
type ScaleInfo struct {
	Job                 string
	Instance, Instances int
	Topic               string // the repartition topic
	Dynamic             bool   // ownership group: the buckets move
}

// ReadScaleInfo reads which instance of job the data directory runs; ok
// is false when the job is not scaled there.
func ReadScaleInfo(dataDir, job string) (info ScaleInfo, ok bool, err error) {
	path := scaleFile(dataDir, job)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ScaleInfo{}, false, nil
	}
	if err != nil {
		return ScaleInfo{}, false, fmt.Errorf("read %s: %w", path, err)
	}
	var l scaleLayout
	if err := json.Unmarshal(b, &l); err != nil {
		return ScaleInfo{}, false, fmt.Errorf("read %s: %w", path, err)
	}
	return ScaleInfo{Job: job, Instance: l.Instance, Instances: l.Instances, Topic: l.Topic,
		Dynamic: l.Ownership == string(pipelines.OwnershipGroup)}, true, nil
}

// ScaledWriter finds the scaled job among ps that owns table: a scaled
// job has one sink, so it holds only its instance's buckets of it (a job
// writing into it through its owner, job.scale.owner, holds none). ok is
// false when no scaled job owns it.
func ScaledWriter(ps []*pipelines.Pipeline, table string) (p *pipelines.Pipeline, ok bool) {
	for _, p := range ps {
		if sc := p.Spec.Job.Scale; sc != nil && sc.Owner == "" && len(p.Tables) > 0 && p.Tables[0].Spec.Name == table {
			return p, true
		}
	}
	return nil, false
}

// ErrNoChangelog marks a whole-table read of a scaled table without a
// changelog: its rows are only in the instances' tables.
var ErrNoChangelog = errors.New("build: the scaled table has no changelog to read it whole from")

// ReadScaled reads the whole table of the scaled job p, every instance's
// buckets, from its changelog topic at each instance's newest committed
// version (export.ReadShared), from any process that reaches the
// changelog's cluster.
func (e *Env) ReadScaled(ctx context.Context, p *pipelines.Pipeline) (*export.SharedTable, error) {
	t := p.Tables[0]
	cl := t.Spec.Changelog
	if cl == nil {
		return nil, fmt.Errorf("%w: table %q of job %q: give it a changelog (sink.table.changelog) to read it whole", ErrNoChangelog, t.Spec.Name, p.Spec.Job.Name)
	}
	conn, err := e.KafkaConnection(cl.Connection)
	if err != nil {
		return nil, err
	}
	sc := *p.Spec.Job.Scale
	cfg := export.SharedConfig{Kafka: conn, Topic: cl.Topic, Format: export.Format(cl.Format)}
	for i := range sc.Instances {
		sc.Instance = i
		cfg.Owners = append(cfg.Owners, export.Owner{Name: fmt.Sprintf("instance %d of %d", i, sc.Instances),
			VersionsTopic: ScaledVersionsTopic(cl.Topic, i), Partitions: OwnedBuckets(&sc, t.Spec.Buckets)})
	}
	return export.ReadShared(ctx, cfg)
}

// ReadOwnerLog reads the whole table of the scaled job p with ownership
// group from its owner log, every bucket as its owner last published it
// (repartition.ReadAll), into a table of its own in a temporary folder;
// close removes both. The table has the columns of p and of the jobs among
// ps that write into it through p (job.scale.owner). From any process that
// reaches the job's cluster.
func (e *Env) ReadOwnerLog(ctx context.Context, p *pipelines.Pipeline, ps []*pipelines.Pipeline) (t *aggmerge.Table, close func() error, err error) {
	conn, err := e.KafkaConnection(p.Spec.Sources[0].Kafka.Connection)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "ebbflow-owner-log-")
	if err != nil {
		return nil, nil, err
	}
	tmp := NewEnv(Options{DataDir: dir, Logger: e.log})
	close = func() error { return errors.Join(tmp.Close(), os.RemoveAll(dir)) }
	name := p.Tables[0].Spec.Name
	writers := []*pipelines.Pipeline{p}
	for _, q := range ps {
		if sc := q.Spec.Job.Scale; sc != nil && sc.Owner == p.Spec.Job.Name {
			writers = append(writers, q)
		}
	}
	if err := tmp.OpenTables(writers); err != nil {
		return nil, nil, errors.Join(err, close())
	}
	t = tmp.tables[name]
	if _, err := repartition.ReadAll(ctx, conn, p.RepartitionTopic(), t); err != nil {
		return nil, nil, errors.Join(err, close())
	}
	return t, close, nil
}
