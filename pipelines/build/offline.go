package build

import (
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// Offline is a job's record path outside a running job, for an oracle that
// recomputes the job's tables from its input (runner verify): the decoding
// of its Kafka sources, its transforms and the tables' checks (as the
// "<source>-transforms" operators run them), and the mapping of a kept row
// into each table sink's write (as the writers' "-map" operators do). It
// is not safe for concurrent use.
type Offline struct {
	p        *pipelines.Pipeline
	tr       *pipelines.Transformer
	decoders []kafka.Decoder[Row] // per source; nil for a datagen into the job
	gens     []*pipelines.Generator
	maps     []writer.Mapper[Row] // per sink
	rows     *pipelines.RowBuilder
}

// NewOffline returns the record path of p. Sources that read a changelog
// (format upsert-json or debezium-json) are refused: their rows depend on
// the state the source keeps.
func NewOffline(p *pipelines.Pipeline) (*Offline, error) {
	o := &Offline{p: p, tr: p.NewTransformer(), rows: p.NewRowBuilder()}
	for i := range p.Spec.Sources {
		src := &p.Spec.Sources[i]
		var dec kafka.Decoder[Row]
		var gen *pipelines.Generator
		switch {
		case src.Kafka != nil && src.Kafka.Format.Changelog():
			return nil, fmt.Errorf("source %q reads a changelog (format %s): not supported offline", src.Name, src.Kafka.Format)
		case src.Kafka != nil:
			dec = rowFormat(p, src.Kafka)()
		case src.Datagen != nil && src.Datagen.Topic != "":
			dec = kafka.JSONWith(p.NewRowBuilder().FromJSON)()
		case src.Datagen != nil:
			for _, f := range src.Datagen.Fields {
				if f.Now {
					return nil, fmt.Errorf("source %q: field %s is the wall-clock time (now: true), so its records cannot be made again", src.Name, f.Name)
				}
			}
			var err error
			if gen, err = p.NewGenerator(i); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("source %q: a %s source has no offline path", src.Name, src.Kind())
		}
		o.decoders = append(o.decoders, dec)
		o.gens = append(o.gens, gen)
	}
	if p.Dedupe != nil {
		return nil, fmt.Errorf("the dedupe step keeps state across records: not supported offline")
	}
	for _, t := range p.Tables {
		if w := t.Window; w != nil && w.Gap > 0 {
			return nil, fmt.Errorf("table %s: a session window keeps state across records: not supported offline", t.Spec.Name)
		}
		if w := t.Window; w != nil && w.Expanded() {
			return nil, fmt.Errorf("table %s: a hopping window or a retention is not supported offline", t.Spec.Name)
		}
		o.maps = append(o.maps, mapper(p, t))
	}
	return o, nil
}

// Decode decodes a record of Kafka source i (or of datagen source i's
// topic) as the source does; an error is for the source's on_error policy.
func (o *Offline) Decode(i int, r *kgo.Record) (Row, error) { return o.decoders[i](r) }

// Generate returns record n of datagen source i, which feeds the job
// directly.
func (o *Offline) Generate(i int, n int64) Row { return o.gens[i].Row(n) }

// Transform runs the job's steps on r in place and checks it against the
// tables; false: a filter dropped it. An error is for the source's
// on_error policy (a datagen's is fail).
func (o *Offline) Transform(r Row) (bool, error) { return transform(o.p, o.tr, r) }

// Write maps a transformed row into the write of table sink i. An error
// fails the job in a running one, whatever the policy.
func (o *Offline) Write(i int, r Row, w *writer.Row) error { return o.maps[i](r, w) }

// JSON renders a row as JSON, for messages.
func (o *Offline) JSON(r Row) string { return string(o.rows.AppendJSON(nil, r)) }

// Covered is what a completed checkpoint covers of one source: for a Kafka
// source (and a datagen into a topic, which the job reads back), the next
// offset of every partition read; for a datagen into the job, its lanes.
type Covered struct {
	Offsets map[string]map[int32]int64 // topic → partition → next offset
	Lanes   []DatagenLane
}

// CoveredBy returns what checkpoint md covers of source i of the job.
func (o *Offline) CoveredBy(md state.Metadata, i int) (Covered, error) {
	name := o.p.Spec.Sources[i].Name
	op, ok := md.Operators[name]
	if !ok {
		return Covered{}, fmt.Errorf("checkpoint %d holds no state of source %q", md.ID, name)
	}
	if o.gens[i] == nil {
		offs, err := kafka.CheckpointedOffsets(op)
		if err != nil {
			return Covered{}, fmt.Errorf("checkpoint %d source %q: %w", md.ID, name, err)
		}
		return Covered{Offsets: offs}, nil
	}
	var c Covered
	for _, st := range op.Subtasks {
		for _, item := range st.Unions[lanesUnion] {
			var l DatagenLane
			if err := json.Unmarshal(item, &l); err != nil {
				return Covered{}, fmt.Errorf("checkpoint %d source %q: datagen position: %w: %v", md.ID, name, state.ErrCorrupt, err)
			}
			c.Lanes = append(c.Lanes, l)
		}
	}
	return c, nil
}
