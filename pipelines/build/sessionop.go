package build

import (
	"fmt"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
	"github.com/ebbflow/ebbflow/state"
)

// A session window's "<sink>-window" is operators.SessionWindows keyed by
// the primary key alone (a record's session is not known before it is
// merged), the partials those of the table's own functions: emit: final
// writes a session's row once, when it closes; emit: updates writes a
// record's partials into its session's row, and, when it opens, extends or
// merges sessions, clears the rows of the sessions it replaced
// (writer.Config.Clears: a -D each) and writes the new session's row with
// all its partials. A merge combines whole sessions, not records in their
// order of arrival, so validation admits only commutative functions
// (agg.Func.Commutative). The sessions and their timers are keyed state in
// pebble: checkpointed, restored and rescaled by key group, so a restore
// merges and fires the same sessions with the same values.

// sessionWindows adds the session window operator of table t, named name,
// reading in.
func sessionWindows(t *pipelines.Table, table *aggmerge.Table, cols []string, name string, in runtime.Stream[Row]) (runtime.Stream[windowed], error) {
	w := t.Window
	ks := runtime.KeyBy(in, func(r Row) string {
		k, err := encodeSessionKey(t, table, r)
		if err != nil {
			return "" // checkTables keeps it from happening; no key decodes from nothing
		}
		return string(k)
	}, state.StringCodec{})
	parts := newPartials(t, table, cols)
	events, err := operators.SessionWindows(ks, name, operators.SessionConfig[Row, []agg.Value]{
		Gap: w.Gap, Lateness: w.Lateness, Final: w.Final,
		EventTime: func(r Row) int64 {
			at, _ := r[w.On.Slot].(time.Time) // checkTables: not null
			return watermark.FromTime(at)
		},
		Partial: parts.of, Combine: parts.combine, Codec: partialsCodec{parts.types},
		LateLabels: lateLabels(t), EmitLate: w.Late == pipelines.LateDeadLetter,
	})
	if err != nil {
		return runtime.Stream[windowed]{}, err
	}
	key := table.Schema().Key
	pkTypes := make([]agg.Type, len(key)-2) // without the window's bounds
	for i := range pkTypes {
		pkTypes[i] = key[i].Type
	}
	return runtime.Apply(events, name+"-rows", func() runtime.Operator[sessionEvent, windowed] {
		return &sessionRows{t: t, pkTypes: pkTypes}
	}), nil
}

type sessionEvent = operators.SessionEvent[string, Row, []agg.Value]

// encodeSessionKey returns the encoded primary key of record r, without
// the window's bounds.
func encodeSessionKey(t *pipelines.Table, table *aggmerge.Table, r Row) ([]byte, error) {
	key, err := appendFields(t, r, nil)
	if err != nil {
		return nil, err
	}
	return table.AppendKeyPrefix(nil, key)
}

// sessionRows turns session events into the writer's windowed rows: the
// session's table key (the primary key decoded, then the bounds) with its
// partials or a clear, or a late record to dead-letter. It is chained to
// the session operator.
type sessionRows struct {
	t       *pipelines.Table
	pkTypes []agg.Type
}

func (o *sessionRows) Open(*runtime.Context) error { return nil }

func (o *sessionRows) ProcessBatch(in []sessionEvent, out *runtime.Collector[windowed]) error {
	for _, e := range in {
		if e.Late != nil {
			out.Emit(windowed{row: e.Record, late: fmt.Errorf("late: table %s: %w", o.t.Spec.Name, e.Late)})
			continue
		}
		k, err := encoding.DecodeKey([]byte(e.Key), o.pkTypes, make([]agg.Value, 0, len(o.pkTypes)+2))
		if err != nil {
			return fmt.Errorf("table %s: decode session key: %w", o.t.Spec.Name, err)
		}
		k = append(k, agg.TimestampValue(watermark.ToTime(e.Session.Start)), agg.TimestampValue(watermark.ToTime(e.Session.End)))
		out.Emit(windowed{key: k, vals: e.Acc, clear: e.Clear})
	}
	return nil
}

func (o *sessionRows) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (o *sessionRows) NotifyComplete(barrier.CheckpointID) error { return nil }
func (o *sessionRows) Close() error                              { return nil }
