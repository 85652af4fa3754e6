package build

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// A windowed table that consults the watermark (emit: final, or late: drop
// or dead_letter) is fed through "<sink>-assign", which puts a record in
// each of its windows (one for a tumbling window, hop/every for a hopping
// one), then "<sink>-window", a keyed processor keyed by the table key
// (primary key, window_start, window_end, encoded as the table encodes
// it), and, with late: dead_letter, "<sink>-late" chained after it, before
// the writer. Each of a record's windows is on its own, as if it were a
// record of a tumbling window:
//
//   - a record in a window that closed (the processor's watermark reached
//     TableWindow.ClosesAt of its end) is late for it: counted in
//     ebbflow_late_records_total{table,policy}, then dropped or handed to
//     "<sink>-late", which dead-letters it;
//   - emit: updates: any other record goes on to the writer as it is;
//   - emit: final: its values are folded, as partial aggregates of the
//     table's own functions (agg.Func Partial and Combine), into the
//     window's entry of the keyed state "windows". The window fires once,
//     when the processor's watermark reaches ClosesAt of its end
//     (OnWatermark): its row goes to the writer (Config.Partials) and its
//     state is deleted. The partials are keyed state: checkpointed,
//     restored and rescaled by key group with the rest, so a restore fires
//     the windows its checkpoint held open, at the same watermarks, with
//     the same values.
//
// A window's key says when it closes, so the processor needs no timer per
// window: it keeps in memory the keys of its open windows by close time,
// rebuilt from the state in Open (Value.LoadAll, which also lets a new
// window's Get miss without reading the backend). Up to issue #15 each
// window had an event-time timer, a second state entry; a checkpoint of
// that time restores: its timers are discarded (runtime.DiscardEventTimers).
//
// Every window of a key and every key fires exactly once, so the table's
// changelog carries one +I per window and key, and nothing before it
// closed. The processor is keyed by the whole table key: a firing is one
// state lookup, and the windows of one close time fire in the order of the
// encoded key.

// windowed is what a window operator emits: an on-time record of an
// updates window (row, in the window [start, end), ns since the epoch);
// partial aggregates of a window's row (key: the table key, vals: the
// partial of each column), a closed final window or a session's update;
// with clear, the removal of a merged session's row (key); or, with late
// set, a late record (row) to dead-letter.
type windowed struct {
	row        Row
	start, end int64
	key        []agg.Value
	vals       []agg.Value
	clear      bool
	late       error
}

// inWindow is a record in one of its windows [start, end) (ns since the
// epoch), as "<sink>-assign" hands it to the window operator of a tumbling
// or hopping window: one per window of the record, with the encoded table
// key (primary key, window_start, window_end) made once, before the
// shuffle, for the partitioner and the keyed state.
type inWindow struct {
	row        Row
	start, end int64
	key        string
}

// windowSink adds the window operator of table t (sink i) reading in, and
// the writer of the table after it: "<sink>-window", keyed by the table key
// (windowProc, after "<sink>-assign", which puts each record in each of
// its windows), or, for a session window, by the primary key
// (sessionWindows). With retain the writer deletes the windows past it
// (writer.Window.Assigned: the keys carry their bounds).
func windowSink(e *Env, p *pipelines.Pipeline, i int, t *pipelines.Table, table *aggmerge.Table, cfg writer.Config, in runtime.Stream[Row]) error {
	name := p.Spec.Sinks[i].Name
	w := t.Window
	var out runtime.Stream[windowed]
	if w.Gap > 0 {
		var err error
		if out, err = sessionWindows(t, table, cfg.Columns, name+"-window", in); err != nil {
			return err
		}
	} else {
		assigned := runtime.Apply(in, name+"-assign", func() runtime.Operator[Row, inWindow] {
			return &assignOp{t: t, table: table, windows: watermark.Windows{Size: w.Size, Slide: w.Slide}}
		})
		ks := runtime.KeyBy(assigned, func(v inWindow) string { return v.key }, state.StringCodec{})
		out = runtime.Process(ks, name+"-window", func() runtime.KeyedProcessor[string, inWindow, windowed] {
			return newWindowProc(t, table, cfg.Columns)
		})
	}
	if w.Late == pipelines.LateDeadLetter {
		policy, err := e.lateDeadLetters(w.DeadLetter)
		if err != nil {
			return err
		}
		out = runtime.Apply(out, name+"-late", func() runtime.Operator[windowed, windowed] {
			return &lateOp{policy: policy, rows: p.NewRowBuilder()}
		})
	}
	cfg.Partials = w.Final || w.Gap > 0
	cfg.Clears = w.Gap > 0 && !w.Final
	if w.Retain != nil {
		cfg.Window = &writer.Window{Assigned: true, Retain: w.Retain}
	}
	return writer.To(out, name, cfg, func(v windowed, row *writer.Row) error {
		row.Clear = v.clear
		if v.row != nil {
			row.Kind = v.row.Kind(p.KindSlot)
			var err error
			if row.Key, err = appendFields(t, v.row, row.Key[:0]); err != nil {
				return err
			}
			row.Key = appendBounds(row.Key, v.start, v.end)
			row.Vals, err = appendValues(t, v.row, row.Vals[:0])
			return err
		}
		row.Kind = runtime.RowInsert
		row.Key = append(row.Key[:0], v.key...)
		row.Vals = append(row.Vals[:0], v.vals...)
		return nil
	})
}

// lateDeadLetters is the dead-letter policy of a window's late records:
// the topic and connection of source k.
func (e *Env) lateDeadLetters(k *pipelines.KafkaSource) (*errorPolicy, error) {
	conn, err := e.KafkaConnection(k.Connection)
	if err != nil {
		return nil, err
	}
	return &errorPolicy{policy: kafka.DeadLetter, topic: k.DeadLetterTopic, conn: conn}, nil
}

// assignOp is a subtask of "<sink>-assign": it puts each record in each of
// its windows, with the window's encoded table key.
type assignOp struct {
	t       *pipelines.Table
	table   *aggmerge.Table
	windows watermark.Windows
	starts  []int64
	key     []agg.Value
	buf     []byte
}

func (o *assignOp) Open(*runtime.Context) error { return nil }

func (o *assignOp) ProcessBatch(in []Row, out *runtime.Collector[inWindow]) error {
	w := o.t.Window
	for _, r := range in {
		at, ok := r[w.On.Slot].(time.Time)
		if !ok {
			return fmt.Errorf("table %s window field %s: %w", o.t.Spec.Name, w.On.Name, errNullKey) // checkTables keeps it from happening
		}
		var err error
		if o.key, err = appendFields(o.t, r, o.key[:0]); err != nil {
			return err
		}
		n := len(o.key)
		o.starts = o.windows.Starts(o.starts[:0], watermark.FromTime(at))
		for _, start := range o.starts {
			end := start + int64(o.windows.Size)
			if o.buf, err = o.table.AppendKey(o.buf[:0], appendBounds(o.key[:n], start, end)); err != nil {
				return err
			}
			out.Emit(inWindow{row: r, start: start, end: end, key: string(o.buf)})
		}
	}
	return nil
}

func (o *assignOp) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (o *assignOp) NotifyComplete(barrier.CheckpointID) error { return nil }
func (o *assignOp) Close() error                              { return nil }

// windowProc is a subtask of "<sink>-window" for a tumbling or hopping
// window: each of a record's windows is a key of its own.
type windowProc struct {
	t        *pipelines.Table
	keyTypes []agg.Type
	parts    partials
	ctx      *runtime.Context
	windows  *state.Value[string, []agg.Value] // emit: final: the partials of each open window
	open     map[int64][]string                // emit: final: the keys of windows, by close time
	closing  []int64                           // the close times due at a watermark
	scratch  []agg.Value                       // a record's partials, before they are folded
	late     lateRecords
}

func newWindowProc(t *pipelines.Table, table *aggmerge.Table, cols []string) *windowProc {
	w := &windowProc{t: t, parts: newPartials(t, table, cols), late: lateRecords{t: t}}
	for _, c := range table.Schema().Key {
		w.keyTypes = append(w.keyTypes, c.Type)
	}
	return w
}

func (w *windowProc) Open(ctx *runtime.Context, keyed *state.Keyed) error {
	w.ctx = ctx
	if err := w.late.register(ctx); err != nil {
		return err
	}
	if !w.t.Window.Final {
		return nil
	}
	if n, err := runtime.DiscardEventTimers(keyed); err != nil {
		return err
	} else if n > 0 {
		ctx.Logger.Info("restored a checkpoint with a timer per window (before issue #15): discarded them, the windows close by their keys",
			"table", w.t.Spec.Name, "timers", n)
	}
	w.windows = state.NewValue(keyed, "windows", state.StringCodec{}, state.Codec[[]agg.Value](partialsCodec{w.parts.types}))
	w.open = map[int64][]string{}
	return w.windows.LoadAll(func(key string, _ []agg.Value) error {
		closes, err := w.closesAt(key)
		if err != nil {
			return err
		}
		w.open[closes] = append(w.open[closes], key)
		return nil
	})
}

// closesAt returns when the window of key (an encoded table key, ending in
// window_start and window_end) closes: as Process has it, window sizes being
// whole milliseconds (the key holds microseconds).
func (w *windowProc) closesAt(key string) (int64, error) {
	k, err := encoding.DecodeKey([]byte(key), w.keyTypes, nil)
	if err != nil {
		return 0, fmt.Errorf("table %s: decode window key: %w", w.t.Spec.Name, err)
	}
	return w.t.Window.ClosesAt(k[len(k)-1].Time()), nil
}

func (w *windowProc) Process(key string, v inWindow, out *runtime.Collector[windowed]) error {
	win := w.t.Window
	end := time.Unix(0, v.end).UTC()
	closes := win.ClosesAt(end)
	if wm := w.ctx.Watermark(); closes <= wm {
		w.late.emit(v.row, out, fmt.Errorf("late: table %s: its window ending %s closed at watermark %s (allowed lateness %s)",
			w.t.Spec.Name, end.Format(time.RFC3339Nano), watermark.Format(wm), win.Lateness))
		return nil
	}
	if !win.Final {
		out.Emit(windowed{row: v.row, start: v.start, end: v.end})
		return nil
	}
	acc, found, err := w.windows.Get(key)
	if err != nil {
		return err
	}
	if !found { // a new window: its partials, and its key in the index
		if acc, err = w.parts.appendOf(nil, v.row); err != nil {
			return err
		}
		w.open[closes] = append(w.open[closes], key)
		return w.windows.Put(key, acc)
	}
	// Fold into acc in place: the state is its only holder until the window
	// fires, and the Put marks it for the next checkpoint.
	if w.scratch, err = w.parts.appendOf(w.scratch[:0], v.row); err != nil {
		return err
	}
	if err := w.parts.combineInto(acc, acc, w.scratch); err != nil {
		return err
	}
	return w.windows.Put(key, acc)
}

// OnWatermark fires the windows that close at or before wm: their rows go
// to the writer, once.
func (w *windowProc) OnWatermark(wm int64, out *runtime.Collector[windowed]) error {
	return w.fireUpTo(wm, out.Emit)
}

// fireUpTo fires the windows that close at or before wm, the earliest close
// time first, each time's windows in the order of their key: emit gets the
// row of each.
func (w *windowProc) fireUpTo(wm int64, emit func(windowed)) error {
	w.closing = w.closing[:0]
	for closes := range w.open {
		if closes <= wm {
			w.closing = append(w.closing, closes)
		}
	}
	slices.Sort(w.closing)
	for _, closes := range w.closing {
		keys := w.open[closes]
		slices.Sort(keys) // the encoded keys (StringCodec: their bytes)
		for _, key := range keys {
			if err := w.fire(key, emit); err != nil {
				return err
			}
		}
		delete(w.open, closes)
	}
	return nil
}

// fire emits the row of the window of key and deletes its state.
func (w *windowProc) fire(key string, emit func(windowed)) error {
	acc, found, err := w.windows.Get(key)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("table %s: an open window without its partials", w.t.Spec.Name)
	}
	k, err := encoding.DecodeKey([]byte(key), w.keyTypes, nil)
	if err != nil {
		return fmt.Errorf("table %s: decode window key: %w", w.t.Spec.Name, err)
	}
	emit(windowed{key: k, vals: acc})
	return w.windows.Delete(key)
}

func (w *windowProc) Close() error { return nil }

// lateRecords counts the late records of a window operator
// (ebbflow_late_records_total) and, with late: dead_letter, hands them on
// to "<sink>-late".
type lateRecords struct {
	t       *pipelines.Table
	counter prometheus.Counter
}

// lateLabels label the late records of table t's window.
func lateLabels(t *pipelines.Table) prometheus.Labels {
	return prometheus.Labels{"table": t.Spec.Name, "policy": string(t.Window.Late)}
}

func (l *lateRecords) register(ctx *runtime.Context) error {
	l.counter = prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_late_records_total",
		Help:        "Records that came after their window closed (the watermark passed its end plus allowed_lateness), by the window's late policy.",
		ConstLabels: lateLabels(l.t)})
	if err := ctx.Registerer.Register(l.counter); err != nil {
		return fmt.Errorf("register window metrics: %w", err)
	}
	return nil
}

// emit counts late record r and, to be dead-lettered, emits it with why.
func (l *lateRecords) emit(r Row, out *runtime.Collector[windowed], why error) {
	l.counter.Inc()
	if l.t.Window.Late == pipelines.LateDeadLetter {
		out.Emit(windowed{row: r, late: why})
	}
}

// partials turns records into the partial aggregates of the columns a
// window operator writes (agg.Func Partial and Combine), in the order of
// t.Columns.
type partials struct {
	t     *pipelines.Table
	funcs []*agg.Func
	types []agg.Type
}

func newPartials(t *pipelines.Table, table *aggmerge.Table, cols []string) partials {
	p := partials{t: t}
	sch := table.Schema()
	for _, name := range cols {
		i := sch.ValueIndex(name)
		p.funcs = append(p.funcs, table.Func(i))
		p.types = append(p.types, sch.Values[i].Type)
	}
	return p
}

// of returns the partials of record r, in a new slice. It keeps no
// scratch: the subtasks of a session window share one partials.
func (p partials) of(r Row) ([]agg.Value, error) {
	return p.appendOf(make([]agg.Value, 0, len(p.t.Columns)), r)
}

// appendOf appends the partials of record r to dst (a new slice when nil).
func (p partials) appendOf(dst []agg.Value, r Row) ([]agg.Value, error) {
	for j := range p.t.Columns {
		c := &p.t.Columns[j]
		v, err := c.Value(r)
		if err != nil {
			return nil, err
		}
		in, err := agg.Conform(p.types[j], v)
		if err != nil {
			return nil, fmt.Errorf("table %s column %s: %w", p.t.Spec.Name, c.Name, err)
		}
		dst = append(dst, p.funcs[j].Partial(in))
	}
	return dst, nil
}

// combine returns, in a new slice, the partials a combined with b (b came
// later); neither is changed, as the state or a downstream batch may hold
// them.
func (p partials) combine(a, b []agg.Value) ([]agg.Value, error) {
	out := make([]agg.Value, len(a))
	return out, p.combineInto(out, a, b)
}

// combineInto sets dst to the partials a combined with b (b came later);
// dst may be a.
func (p partials) combineInto(dst, a, b []agg.Value) error {
	for j := range a {
		var err error
		if dst[j], err = p.funcs[j].Combine(a[j], b[j]); err != nil {
			return fmt.Errorf("table %s column %s: %w", p.t.Spec.Name, p.t.Columns[j].Name, err)
		}
	}
	return nil
}

// partialsCodec stores a window's partial aggregates as a table row of the
// columns' types.
type partialsCodec struct{ types []agg.Type }

func (c partialsCodec) Append(dst []byte, v []agg.Value) []byte {
	return encoding.AppendRow(dst, c.types, v)
}

func (c partialsCodec) Decode(src []byte) ([]agg.Value, error) {
	return encoding.DecodeRow(src, c.types, nil)
}

// lateOp is a subtask of "<sink>-late": it writes the late records to the
// dead-letter topic (as JSON, with the reason in a header) and passes the
// rest on. Its dead letters are flushed at every barrier, so a checkpoint
// never covers a late record whose dead letter could still be lost.
type lateOp struct {
	policy *errorPolicy
	rows   *pipelines.RowBuilder
	dl     *kafka.DeadLetterWriter
	cl     *kgo.Client
}

func (o *lateOp) Open(ctx *runtime.Context) error {
	var err error
	o.dl, o.cl, err = openDeadLetters(ctx, o.policy, "late")
	return err
}

func (o *lateOp) ProcessBatch(in []windowed, out *runtime.Collector[windowed]) error {
	for _, v := range in {
		if v.late != nil {
			o.dl.WriteRecord(nil, o.rows.AppendJSON(nil, v.row), v.late)
			continue
		}
		out.Emit(v)
	}
	return nil
}

func (o *lateOp) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	return state.OperatorState{}, o.dl.Flush(ctx)
}

func (o *lateOp) NotifyComplete(barrier.CheckpointID) error { return nil }

func (o *lateOp) Close() error {
	if o.cl != nil {
		o.cl.Close()
	}
	return nil
}
