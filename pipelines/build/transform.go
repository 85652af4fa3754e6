package build

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// errorPolicy is a source's on_error: what happens to a record whose
// expressions fail or that cannot be written to a table.
type errorPolicy struct {
	policy kafka.ErrorPolicy
	topic  string           // dead_letter
	conn   kafka.Connection // dead_letter: the connection
}

// flushTimeout bounds the wait for dead letters at a barrier.
const flushTimeout = 30 * time.Second

// transformOp runs the steps of a job on the records of one source.
type transformOp struct {
	p       *pipelines.Pipeline
	policy  *errorPolicy
	tr      *pipelines.Transformer
	rows    *pipelines.RowBuilder
	dropped prometheus.Counter
	dl      *kafka.DeadLetterWriter
	cl      *kgo.Client // the dead letters'
	// origin is the Kafka record the rows being processed come from, for
	// their dead letters.
	origin *kgo.Record
}

func newTransformOp(p *pipelines.Pipeline, policy *errorPolicy) *transformOp {
	return &transformOp{p: p, policy: policy}
}

func (o *transformOp) Open(ctx *runtime.Context) error {
	o.tr = o.p.NewTransformer()
	o.rows = o.p.NewRowBuilder()
	reason := prometheus.Labels{"reason": "eval_error"}
	o.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_operator_records_dropped_total",
		Help: "Records dropped by on_error: skip.", ConstLabels: reason})
	if err := ctx.Registerer.Register(o.dropped); err != nil {
		return fmt.Errorf("register transform metrics: %w", err)
	}
	if o.policy.policy != kafka.DeadLetter {
		return nil
	}
	var err error
	o.dl, o.cl, err = openDeadLetters(ctx, o.policy, "eval_error")
	return err
}

// openDeadLetters opens the dead-letter writer of a subtask for policy's
// topic, counting its records in ebbflow_operator_records_dead_lettered_total
// with the label reason; the caller closes the client.
func openDeadLetters(ctx *runtime.Context, policy *errorPolicy, reason string) (*kafka.DeadLetterWriter, *kgo.Client, error) {
	count := prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_operator_records_dead_lettered_total",
		Help:        "Records written to the dead-letter topic: by on_error: dead_letter (reason eval_error) or late: dead_letter (reason late).",
		ConstLabels: prometheus.Labels{"reason": reason}})
	if err := ctx.Registerer.Register(count); err != nil {
		return nil, nil, fmt.Errorf("register dead-letter metrics: %w", err)
	}
	conn, err := policy.conn.Options()
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return nil, nil, fmt.Errorf("dead letter client: %w", err)
	}
	if err := kafka.PrepareDeadLetterTopic(ctx.Context(), kadm.NewClient(cl), policy.topic, ctx.Logger.Warn); err != nil {
		cl.Close()
		return nil, nil, err
	}
	return kafka.NewDeadLetterWriter(context.Background(), cl, policy.topic, count), cl, nil
}

func (o *transformOp) ProcessBatch(in []Row, out *runtime.Collector[Row]) error {
	for _, r := range in {
		if err := o.process(r, out); err != nil {
			return err
		}
	}
	return nil
}

// process runs the steps on r and emits it unless a filter dropped it; a
// failure goes to the policy.
func (o *transformOp) process(r Row, out *runtime.Collector[Row]) error {
	keep, err := transform(o.p, o.tr, r)
	if err != nil {
		return o.failed(o.rows.AppendJSON(nil, r), err)
	}
	if keep {
		out.Emit(r)
	}
	return nil
}

// failed applies the policy to a record, given as JSON, that failed.
func (o *transformOp) failed(record []byte, err error) error {
	switch o.policy.policy {
	case kafka.Skip:
		o.dropped.Inc()
		return nil
	case kafka.DeadLetter:
		o.dl.Write(o.origin, record, err)
		return nil
	}
	// A restart would meet the same record again: fail for good, as the
	// Kafka source does with a record it cannot decode.
	return runtime.Permanent(fmt.Errorf("record %s: %w", record, err))
}

// transform runs the steps of p on r in place and then checks r against
// p's tables; false: a filter dropped it. An error is for the source's
// on_error policy.
func transform(p *pipelines.Pipeline, tr *pipelines.Transformer, r Row) (bool, error) {
	keep, err := tr.Apply(r)
	if err == nil && keep {
		err = checkDedupe(p, r)
	}
	if err == nil && keep {
		err = checkTables(p, r)
	}
	return keep, err
}

// checkTables finds, before the record reaches a writer (where an error
// would fail the job whatever the policy), a null primary key or a value a
// sketch column cannot take.
func checkTables(p *pipelines.Pipeline, r Row) error {
	for _, t := range p.Tables {
		for _, k := range t.Key {
			if r[k.Slot] == nil {
				return fmt.Errorf("%w: table %s: primary key field %s is null", pipelines.ErrEval, t.Spec.Name, k.Name)
			}
		}
		if w := t.Window; w != nil && r[w.On.Slot] == nil {
			return fmt.Errorf("%w: table %s: window field %s is null", pipelines.ErrEval, t.Spec.Name, w.On.Name)
		}
		for i := range t.Columns {
			switch c := &t.Columns[i]; c.Func {
			case "rbm32", "rbm64":
				if _, err := c.Value(r); err != nil {
					return fmt.Errorf("table %s: %w", t.Spec.Name, err)
				}
			}
		}
	}
	return nil
}

func (o *transformOp) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	if o.dl == nil {
		return state.OperatorState{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	return state.OperatorState{}, o.dl.Flush(ctx)
}

func (o *transformOp) NotifyComplete(barrier.CheckpointID) error { return nil }

func (o *transformOp) Close() error {
	if o.cl != nil {
		o.cl.Close()
	}
	return nil
}

// fromKafka is a row of a Kafka source and the record it was decoded from.
type fromKafka struct {
	row Row
	rec *kgo.Record
}

// kafkaRowOp runs the steps on the rows of a Kafka source; a row that
// fails is dead-lettered with its record's origin.
type kafkaRowOp struct{ *transformOp }

func (o kafkaRowOp) ProcessBatch(in []fromKafka, out *runtime.Collector[Row]) error {
	defer func() { o.origin = nil }()
	for i := range in {
		o.origin = in[i].rec
		if err := o.process(in[i].row, out); err != nil {
			return err
		}
	}
	return nil
}

// valuesOp runs the steps on the records of a source registered from Go,
// each placed in a Row first. A record whose values do not fit its fields
// is the source's bug: it fails the job for good, as a restart would meet
// it again.
type valuesOp struct {
	*transformOp
	row func([]any) (Row, error)
}

func (o valuesOp) ProcessBatch(in [][]any, out *runtime.Collector[Row]) error {
	for _, vals := range in {
		r, err := o.row(vals)
		if err != nil {
			return runtime.Permanent(err)
		}
		if err := o.process(r, out); err != nil {
			return err
		}
	}
	return nil
}

// errNullKey is a null primary key value reaching the writer (checkTables
// keeps it from happening).
var errNullKey = errors.New("build: null primary key")

// mapper makes the writer's row of table t of p from a record: its kind,
// the key fields as table values (and the window's bounds, appendKey), then
// each column's input (TableColumn.Value).
func mapper(p *pipelines.Pipeline, t *pipelines.Table) writer.Mapper[Row] {
	return func(r Row, row *writer.Row) error {
		row.Kind = r.Kind(p.KindSlot)
		var err error
		if row.Key, err = appendKey(t, r, row.Key[:0]); err != nil {
			return err
		}
		row.Vals, err = appendValues(t, r, row.Vals[:0])
		return err
	}
}

// expandingMapper is mapper for a window the writer expands
// (TableWindow.Expanded): the key without the window's bounds, and the
// record's event time in At.
func expandingMapper(p *pipelines.Pipeline, t *pipelines.Table) writer.Mapper[Row] {
	w := t.Window
	return func(r Row, row *writer.Row) error {
		row.Kind = r.Kind(p.KindSlot)
		var err error
		if row.Key, err = appendFields(t, r, row.Key[:0]); err != nil {
			return err
		}
		at, ok := r[w.On.Slot].(time.Time)
		if !ok {
			return fmt.Errorf("table %s window field %s: %w", t.Spec.Name, w.On.Name, errNullKey)
		}
		row.At = watermark.FromTime(at)
		row.Vals, err = appendValues(t, r, row.Vals[:0])
		return err
	}
}

// appendKey appends the table key of record r to key: the primary key
// fields as table values, then, for a windowed table, the bounds of the
// record's window.
func appendKey(t *pipelines.Table, r Row, key []agg.Value) ([]agg.Value, error) {
	key, err := appendFields(t, r, key)
	if err != nil {
		return key, err
	}
	if w := t.Window; w != nil {
		at, ok := r[w.On.Slot].(time.Time)
		if !ok {
			return key, fmt.Errorf("table %s window field %s: %w", t.Spec.Name, w.On.Name, errNullKey)
		}
		start, end := w.Bounds(at)
		key = appendBounds(key, start.UnixNano(), end.UnixNano())
	}
	return key, nil
}

// appendBounds appends the window_start and window_end key values of the
// window [start, end) (ns since the epoch) to key.
func appendBounds(key []agg.Value, start, end int64) []agg.Value {
	return append(key, agg.TimestampValue(watermark.ToTime(start)), agg.TimestampValue(watermark.ToTime(end)))
}

// appendFields appends the primary key fields of record r to key, as
// table values.
func appendFields(t *pipelines.Table, r Row, key []agg.Value) ([]agg.Value, error) {
	for _, k := range t.Key {
		if r[k.Slot] == nil {
			return key, fmt.Errorf("table %s field %s: %w", t.Spec.Name, k.Name, errNullKey)
		}
		v, err := pipelines.AggValue(k.Type, r[k.Slot])
		if err != nil {
			return key, err
		}
		key = append(key, v)
	}
	return key, nil
}

// appendValues appends each column's input of record r to vals.
func appendValues(t *pipelines.Table, r Row, vals []agg.Value) ([]agg.Value, error) {
	for i := range t.Columns {
		v, err := t.Columns[i].Value(r)
		if err != nil {
			return vals, err
		}
		vals = append(vals, v)
	}
	return vals, nil
}
