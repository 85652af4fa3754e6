package build

import (
	"fmt"

	"github.com/valyala/fastjson"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// changelogSource adds a Kafka source reading a changelog (format
// upsert-json or debezium-json), with the tracker of the upstream versions
// it consumes (Env.upstream) and, with align: versions, the boundaries of
// those versions, and returns its exact changes: upsert-json
// records do not say what they replace, so they go through
// kafka.NormalizeChanges ("<source>-normalize"), which keeps the last row
// of every record key in checkpointed keyed state and derives -U and -D.
func (e *Env) changelogSource(j *Job, name string, k *pipelines.KafkaSource) (runtime.Stream[kafka.Change], *errorPolicy, error) {
	cfg, policy, err := e.kafkaSource(k)
	if err != nil {
		return runtime.Stream[kafka.Change]{}, nil, err
	}
	format, err := changelogfmt.Lookup(string(k.Format))
	if err != nil {
		return runtime.Stream[kafka.Change]{}, nil, err
	}
	// The source's positions at each checkpoint tell which versions of the
	// changelogs it reads the job consumed: the versions of the tables it
	// writes record them.
	cfg.Positions = kafka.NewPositions()
	up, err := export.NewUpstream(cfg.Connection, cfg.Positions, cfg.Topics, nil)
	if err != nil {
		return runtime.Stream[kafka.Change]{}, nil, err
	}
	e.addUpstream(j.Name(), name, up)
	if k.Align == pipelines.AlignVersions {
		// The checkpoints are cut where the upstream versions end.
		if cfg.Align, err = export.NewVersionBoundaries(cfg.Connection, nil); err != nil {
			return runtime.Stream[kafka.Change]{}, nil, err
		}
		// The cut is fixed when the checkpoint is due, at the newest
		// upstream version then.
		cfg.AlignInterval = j.p.Spec.Checkpoint.Interval.Std()
	}
	ks, err := kafka.NewSource(cfg, format.Decoder())
	if err != nil {
		return runtime.Stream[kafka.Change]{}, nil, err
	}
	j.sources = append(j.sources, ks)
	changes := runtime.FromSource(j.rt, name, ks.New)
	if k.Format == pipelines.FormatUpsertJSON {
		changes = kafka.NormalizeChanges(changes, name+"-normalize")
	}
	return changes, policy, nil
}

// changeOp turns exact changes into rows, one per +I/-U/+U/-D image with
// its kind in the kind slot, and runs the job's steps on each on its own:
// a filter keeps a -U or -D row when the old row passes it, a +I or +U row
// when the new one does.
type changeOp struct {
	*transformOp
	parser fastjson.Parser
	buf    []byte
}

func newChangeOp(p *pipelines.Pipeline, policy *errorPolicy) *changeOp {
	return &changeOp{transformOp: newTransformOp(p, policy)}
}

func (o *changeOp) ProcessBatch(in []kafka.Change, out *runtime.Collector[Row]) error {
	defer func() { o.origin = nil }()
	for i := range in {
		o.origin = in[i].Record
		err := in[i].Rows(func(k runtime.RowKind, image kafka.Row) error {
			r, err := o.row(image)
			if err != nil {
				return o.failed(o.buf, err)
			}
			r[o.p.KindSlot] = k
			return o.process(r, out)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// row decodes a row image with the source's schema, as format json does
// (through its JSON text: a decimal written as a JSON number is read as a
// float64 first, so write decimals as strings, as ebbflow's changelog
// does). o.buf keeps the text.
func (o *changeOp) row(image kafka.Row) (Row, error) {
	var err error
	if o.buf, err = image.MarshalJSON(); err != nil {
		return nil, err
	}
	v, err := o.parser.ParseBytes(o.buf)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", pipelines.ErrDecode, err)
	}
	return o.rows.FromJSON(v)
}
