package build

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/repartition"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
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
	codec, err := repartition.NewCodec(cfg.Table, cfg.Columns)
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
	wcfg := repartition.WriterConfig{Kafka: conn, Group: p.Spec.Job.Name + ".scale", Input: k.Topics,
		Topic: topic, Buckets: buckets, TransactionalID: fmt.Sprintf("ebbflow-%s-%s-repartition-%d", p.Spec.Job.Name, p.Tables[0].Spec.Name, sc.Instance),
		InstanceID: fmt.Sprintf("%s-%d", p.Spec.Job.Name, sc.Instance), Logger: e.log.With("job", p.Spec.Job.Name, "stage", 1)}
	every := p.Spec.Checkpoint.Interval.Std()
	if every <= 0 {
		every = time.Second
	}
	j.side = append(j.side, func(ctx context.Context) error {
		w, err := repartition.NewWriter(ctx, wcfg)
		if err != nil {
			return err
		}
		return w.Run(ctx, every, send)
	})

	src, err := repartition.NewSource(repartition.SourceConfig{Kafka: conn, Topic: topic,
		Owned: repartition.Owned(buckets, sc.Instance, sc.Instances)}, codec)
	if err != nil {
		return err
	}
	j.sources = append(j.sources, src)
	rows := runtime.FromSource(j.rt, "repartition", src.New)
	return writer.To(rows, p.Spec.Sinks[0].Name, cfg, repartition.Mapper)
}
