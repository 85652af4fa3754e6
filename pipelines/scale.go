package pipelines

import (
	"cmp"
	"slices"
	"time"
)

// Scale runs one job in several runner processes that share its work
// through Kafka (docs/SCALING.md).
type Scale struct {
	Mode      ScaleMode `yaml:"mode" required:"true" doc:"kafka: the runners share the input through a consumer group (<job>.scale) and the table's buckets through a repartition topic"`
	Instance  int       `yaml:"instance" default:"0" min:"0" max:"65535" doc:"this runner's number, unique among the job's runners (set it per runner, e.g. --set job.scale.instance=1); with ownership static, 0 to instances-1: it applies the buckets b with b mod instances = instance"`
	Instances int       `yaml:"instances" default:"0" min:"0" max:"65536" doc:"with ownership static (required there): how many runners run the job, every runner's file giving the same number; with ownership group: unused"`
	Topic     string    `yaml:"repartition_topic" doc:"the repartition topic, one partition per bucket (default: <job>.<table>.repartition)"`
	Ownership Ownership `yaml:"ownership" default:"static" doc:"static: instance i of instances owns the buckets b with b mod instances = i, and a runner that stays away leaves them unapplied; group: the runners share the buckets through the consumer group <job>.owners over the repartition topic, and the buckets of a runner that stops or vanishes move to the others (docs/SCALING.md#dynamic-ownership)"`
	Owner     string    `yaml:"owner" doc:"the scaled job that owns the table, when this job writes other columns of it (docs/SCALING.md#independent-jobs-on-one-table): this job runs stage 1 only, into the owner's repartition topic, and the owner's instances apply its rows (load this file in the owner's runners too); absent: this job owns its table"`
	// SessionTimeout is the session timeout of the job's groups.
	SessionTimeout Duration `yaml:"session_timeout" default:"45s" min:"1s" doc:"how long the groups wait for a runner that vanished (SIGKILL, a lost machine) before its input partitions, and with ownership group its buckets, move to the others; at least the brokers' group.min.session.timeout.ms (6s by default)"`
}

// ScaleMode is how the instances of a scaled job share it.
type ScaleMode string

func (ScaleMode) enumValues() []string { return []string{"kafka"} }

// Ownership is how the instances of a scaled job share the buckets.
type Ownership string

// The ownerships.
const (
	OwnershipStatic Ownership = "static"
	OwnershipGroup  Ownership = "group"
)

func (Ownership) enumValues() []string {
	return []string{string(OwnershipStatic), string(OwnershipGroup)}
}

// RepartitionTopic returns the repartition topic of a scaled job: that
// of the table's owner job.
func (p *Pipeline) RepartitionTopic() string {
	if t := p.Spec.Job.Scale.Topic; t != "" {
		return t
	}
	return cmp.Or(p.Spec.Job.Scale.Owner, p.Spec.Job.Name) + "." + p.Tables[0].Spec.Name + ".repartition"
}

// WritesThroughOwner reports whether p writes its columns into the table
// of another scaled job that is among ps: the owner's stage 2 applies its
// rows, and p's stage 1 runs in p's own runner.
func WritesThroughOwner(p *Pipeline, ps []*Pipeline) bool {
	sc := p.Spec.Job.Scale
	return sc != nil && sc.Owner != "" && slices.ContainsFunc(ps, func(q *Pipeline) bool { return q.Spec.Job.Name == sc.Owner })
}

// crossCheckOwner checks a job that writes into an owner job's table
// (job.scale.owner) against the owner, when both are loaded.
func crossCheckOwner(p *Pipeline, jobs map[string]*Pipeline) {
	sc := p.Spec.Job.Scale
	if sc == nil || sc.Owner == "" {
		return
	}
	q, ok := jobs[sc.Owner]
	switch {
	case !ok:
	case q.Spec.Job.Scale == nil || q.Spec.Job.Scale.Owner != "":
		p.where.fail("job.scale.owner", "job %q does not own a scaled table (it needs job.scale without owner)", sc.Owner)
	case len(q.Tables) == 0 || len(p.Tables) == 0 || q.Tables[0].Spec.Name != p.Tables[0].Spec.Name:
		p.where.fail("job.scale.owner", "job %q owns another table than this job writes", sc.Owner)
	case q.RepartitionTopic() != p.RepartitionTopic():
		p.where.fail("job.scale.repartition_topic", "repartition topic %q, and job %q's is %q: a job writes into its owner's", p.RepartitionTopic(), sc.Owner, q.RepartitionTopic())
	}
}

// scale checks what a scaled job may hold today: one Kafka source of
// plain records, stateless transforms, one table sink without window,
// whose changelog (if any) is in committed mode.
func (v *validator) scale() {
	sc := v.spec.Job.Scale
	if sc == nil {
		return
	}
	if sc.Owner != "" {
		v.scaleOwner(sc)
	}
	switch {
	case sc.Owner != "": // stage 1 only: the owner's instances own the buckets
	case sc.Ownership == OwnershipStatic && sc.Instances == 0:
		v.fail("job.scale.instances", "required with ownership static: how many runners run the job")
	case sc.Ownership == OwnershipStatic && sc.Instance >= sc.Instances:
		v.fail("job.scale.instance", "instance %d of %d: want 0 to %d", sc.Instance, sc.Instances, sc.Instances-1)
	}
	if t := sc.Topic; t != "" {
		if err := CheckName(t); err != nil {
			v.fail("job.scale.repartition_topic", "%v", err)
		}
	}
	if iv := v.spec.Checkpoint.Interval.Std(); iv > 5*time.Minute {
		v.fail("checkpoint.interval", "interval %s: in scale mode at most 5m (a stage-1 transaction stays open for an interval, and the broker aborts one after 15 minutes by default)", iv)
	}
	const why = "scale mode supports one Kafka source of json or raw records (docs/SCALING.md)"
	if len(v.spec.Sources) != 1 {
		v.fail("source", "%s, not %d sources", why, len(v.spec.Sources))
	} else if k := v.spec.Sources[0].Kafka; k == nil {
		v.fail("source", "%s, not a %s source", why, v.spec.Sources[0].Kind())
	} else {
		path := v.elem("source", 0) + ".kafka"
		switch {
		case k.Format.Changelog():
			v.fail(path+".format", "%s, not format %s", why, k.Format)
		case k.EventTime != nil:
			v.fail(path+".event_time", "%s: event time is not supported in scale mode yet", why)
		case k.Bounded:
			v.fail(path+".bounded", "%s: a bounded source is not supported in scale mode yet", why)
		case k.TopicPattern != "":
			v.fail(path+".topic_pattern", "%s: name the topics (topic_pattern is not supported in scale mode yet)", why)
		case k.IsolationLevel != "read_committed":
			v.fail(path+".isolation_level", "%s: stage 1 reads read_committed", why)
		case k.StartOffset != "earliest":
			v.fail(path+".start_offset", "%s: the group's committed offsets, else earliest, are where it starts", why)
		}
	}
	const sinkWhy = "scale mode supports one table sink without window, its changelog in committed mode (docs/SCALING.md)"
	if len(v.spec.Sinks) != 1 {
		v.fail("sink", "%s, not %d sinks", sinkWhy, len(v.spec.Sinks))
	} else if t := v.spec.Sinks[0].Table; t != nil {
		path := v.elem("sink", 0) + ".table"
		if cl := t.Changelog; cl != nil && sc.Ownership == OwnershipGroup && len(v.spec.Sources) == 1 {
			if k := v.spec.Sources[0].Kafka; k != nil && !cl.sameCluster(&k.Connection) {
				v.fail(path+".changelog.brokers", "%s: with ownership group the bucket owners write it in their owner log's transactions, "+
					"so on the source's cluster (%s), not %s", sinkWhy, k.Cluster(), cl.Cluster())
			}
		}
		if cl := t.Changelog; cl != nil && cl.Mode != "committed" {
			v.fail(path+".changelog.mode", "%s: mode %s publishes no versions, and the whole table is read from the instances' versions (table scan --all)", sinkWhy, cl.Mode)
		}
		if t.Window != nil {
			v.fail(path+".window", "%s: windows need event time", sinkWhy)
		}
	}
}

// scaleOwner checks a job that writes into another job's scaled table:
// it runs stage 1 only.
func (v *validator) scaleOwner(sc *Scale) {
	switch {
	case sc.Owner == v.spec.Job.Name:
		v.fail("job.scale.owner", "owner %q is this job: a job that owns its table leaves owner out", sc.Owner)
	case CheckName(sc.Owner) != nil:
		v.fail("job.scale.owner", "%v", CheckName(sc.Owner))
	}
	const why = "a job writing into its owner's table runs stage 1 only"
	if sc.Ownership == OwnershipGroup {
		v.fail("job.scale.ownership", "%s: the owner job's instances own the buckets", why)
	}
	if len(v.spec.Sinks) == 1 && v.spec.Sinks[0].Table != nil && v.spec.Sinks[0].Table.Changelog != nil {
		v.fail(v.elem("sink", 0)+".table.changelog", "%s: the owner job's file gives the table's changelog", why)
	}
}
