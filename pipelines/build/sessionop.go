package build

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
	"github.com/ebbflow/ebbflow/state"
)

// A session window's "<sink>-window" is keyed by the primary key alone (a
// record's session is not known before it is merged): per key, the keyed
// state "sessions" holds the open sessions (disjoint, by start) with the
// partial aggregates of their records, and an event-time timer is set at
// each one's close, TableWindow.ClosesAt of its end. A record:
//
//   - late (TableWindow.SessionLate: its time plus the allowed lateness is
//     at or before the watermark) is counted, dropped or dead-lettered: it
//     might belong to a session that has closed;
//   - else makes the window [t, t+gap), merged with the open sessions it
//     overlaps (watermark.Sessions.Assign) into one session whose partials
//     combine theirs and the record's; the merged ones' timers are deleted,
//     the new one's set.
//
// emit: final writes a session's row when its timer fires, once (its
// partials, Config.Partials), and forgets it. emit: updates writes as
// records arrive: a record inside one session adds its partials to the
// session's row; one that opens, extends or merges sessions clears the
// rows of the sessions it replaced (Config.Clears: a -D each) and writes
// the new session's row with all its partials. Its timers only forget
// closed sessions. The order of the partials combined is not the order of
// arrival (a merge combines whole sessions), so validation admits only
// commutative functions (agg.Func.Commutative).
//
// The sessions and timers are keyed state (in pebble): checkpointed,
// restored and rescaled by key group, so a restore fires the same sessions
// at the same watermarks with the same values.

// encodeSessionKey appends the encoded primary key of record r to dst,
// without the window's bounds.
func encodeSessionKey(t *pipelines.Table, table *aggmerge.Table, r Row, dst []byte) ([]byte, error) {
	key, err := appendFields(t, r, nil)
	if err != nil {
		return nil, err
	}
	if r[t.Window.On.Slot] == nil {
		return nil, fmt.Errorf("table %s window field %s: %w", t.Spec.Name, t.Window.On.Name, errNullKey)
	}
	return table.AppendKeyPrefix(dst, key)
}

// openSessions is the state of one key: its open sessions, by start, and
// the partials of each.
type openSessions struct {
	spans []watermark.Session
	accs  [][]agg.Value
}

// sessionProc is a subtask of "<sink>-window" for a session window.
type sessionProc struct {
	t        *pipelines.Table
	table    *aggmerge.Table
	sessions watermark.Sessions
	pkTypes  []agg.Type // the key columns without the window's bounds
	parts    partials
	ctx      *runtime.Context
	timers   *runtime.EventTimers[string]
	open     *state.Value[string, openSessions]
	late     lateRecords
}

func newSessionProc(t *pipelines.Table, table *aggmerge.Table, cols []string) *sessionProc {
	p := &sessionProc{t: t, table: table, sessions: t.Window.Sessions(), parts: newPartials(t, table, cols), late: lateRecords{t: t}}
	key := table.Schema().Key
	for _, c := range key[:len(key)-2] {
		p.pkTypes = append(p.pkTypes, c.Type)
	}
	return p
}

func (p *sessionProc) Open(ctx *runtime.Context, keyed *state.Keyed) error {
	p.ctx = ctx
	if err := p.late.register(ctx); err != nil {
		return err
	}
	p.open = state.NewValue(keyed, "sessions", state.StringCodec{}, state.Codec[openSessions](sessionsCodec{p.parts.types}))
	var err error
	p.timers, err = runtime.NewEventTimers(ctx, keyed, state.StringCodec{})
	return err
}

func (p *sessionProc) Process(key string, r Row, out *runtime.Collector[windowed]) error {
	if key == "" {
		_, err := encodeSessionKey(p.t, p.table, r, nil)
		return p.late.noKey(err)
	}
	win := p.t.Window
	at := watermark.FromTime(r[win.On.Slot].(time.Time)) // the key holds it: not null
	if wm := p.ctx.Watermark(); win.SessionLate(at, wm) {
		p.late.emit(r, out, fmt.Errorf("late: table %s: its time %s is at or before watermark %s minus the allowed lateness %s (its session may have closed)",
			p.t.Spec.Name, watermark.Format(at), watermark.Format(wm), win.Lateness))
		return nil
	}
	in, err := p.parts.of(r)
	if err != nil {
		return err
	}
	st, _, err := p.open.Get(key)
	if err != nil {
		return err
	}
	merged, lo, hi := p.sessions.Assign(st.spans, at)
	if hi == lo+1 && st.spans[lo] == merged { // inside one session: its bounds stay
		if st.accs[lo], err = p.parts.combine(st.accs[lo], in); err != nil {
			return err
		}
		if !win.Final {
			if err := p.emit(r, merged, in, false, out); err != nil {
				return err
			}
		}
		return p.open.Put(key, st)
	}
	acc := in
	for i := hi - 1; i >= lo; i-- { // sessions are combined whole: commutative functions only
		if acc, err = p.parts.combine(st.accs[i], acc); err != nil {
			return err
		}
		if err := p.timers.Delete(key, win.ClosesAt(time.Unix(0, st.spans[i].End))); err != nil {
			return err
		}
		if !win.Final {
			if err := p.emit(r, st.spans[i], nil, true, out); err != nil {
				return err
			}
		}
	}
	if !win.Final {
		if err := p.emit(r, merged, acc, false, out); err != nil {
			return err
		}
	}
	st.spans = slices.Replace(st.spans, lo, hi, merged)
	st.accs = slices.Replace(st.accs, lo, hi, acc)
	if err := p.open.Put(key, st); err != nil {
		return err
	}
	return p.timers.Register(key, win.ClosesAt(time.Unix(0, merged.End)))
}

// emit writes partials vals into the row of session s of record r's key,
// or, with clear, removes that row.
func (p *sessionProc) emit(r Row, s watermark.Session, vals []agg.Value, clear bool, out *runtime.Collector[windowed]) error {
	key, err := appendFields(p.t, r, nil)
	if err != nil {
		return err
	}
	out.Emit(windowed{key: appendBounds(key, s), vals: vals, clear: clear})
	return nil
}

// appendBounds appends the window's start and end to a primary key.
func appendBounds(key []agg.Value, s watermark.Session) []agg.Value {
	return append(key, agg.TimestampValue(watermark.ToTime(s.Start)), agg.TimestampValue(watermark.ToTime(s.End)))
}

// OnEventTime closes the session of key whose close is at: emit: final
// writes its row, once; both modes forget it.
func (p *sessionProc) OnEventTime(key string, at int64, out *runtime.Collector[windowed]) error {
	st, _, err := p.open.Get(key)
	if err != nil {
		return err
	}
	win := p.t.Window
	i := slices.IndexFunc(st.spans, func(s watermark.Session) bool { return win.ClosesAt(time.Unix(0, s.End)) == at })
	if i < 0 {
		return fmt.Errorf("table %s: a session's timer without its session", p.t.Spec.Name)
	}
	if win.Final {
		k, err := encoding.DecodeKey([]byte(key), p.pkTypes, nil)
		if err != nil {
			return fmt.Errorf("table %s: decode session key: %w", p.t.Spec.Name, err)
		}
		out.Emit(windowed{key: appendBounds(k, st.spans[i]), vals: st.accs[i]})
	}
	if len(st.spans) == 1 {
		return p.open.Delete(key)
	}
	st.spans = slices.Delete(st.spans, i, i+1)
	st.accs = slices.Delete(st.accs, i, i+1)
	return p.open.Put(key, st)
}

func (p *sessionProc) Close() error { return nil }

// sessionsCodec stores a key's open sessions: their number, then per
// session its start, end and the length of its partials, stored as a table
// row of the columns' types (partialsCodec), then the row.
type sessionsCodec struct{ types []agg.Type }

func (c sessionsCodec) Append(dst []byte, v openSessions) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v.spans)))
	var row []byte
	for i, s := range v.spans {
		row = encoding.AppendRow(row[:0], c.types, v.accs[i])
		dst = binary.AppendVarint(dst, s.Start)
		dst = binary.AppendVarint(dst, s.End)
		dst = binary.AppendUvarint(dst, uint64(len(row)))
		dst = append(dst, row...)
	}
	return dst
}

var errSessionsCorrupt = errors.New("build: corrupt session state")

func (c sessionsCodec) Decode(src []byte) (openSessions, error) {
	bad := false
	varint := func() int64 {
		x, k := binary.Varint(src)
		if k <= 0 {
			bad = true
			return 0
		}
		src = src[k:]
		return x
	}
	uvarint := func() uint64 { // a count or a length: at most what is left
		x, k := binary.Uvarint(src)
		if k <= 0 || x > uint64(len(src)-k) {
			bad = true
			return 0
		}
		src = src[k:]
		return x
	}
	n := uvarint()
	if bad {
		return openSessions{}, errSessionsCorrupt
	}
	v := openSessions{spans: make([]watermark.Session, n), accs: make([][]agg.Value, n)}
	for i := range v.spans {
		v.spans[i] = watermark.Session{Start: varint(), End: varint()}
		size := uvarint()
		if bad {
			return openSessions{}, errSessionsCorrupt
		}
		acc, err := encoding.DecodeRow(src[:size], c.types, nil)
		if err != nil {
			return openSessions{}, fmt.Errorf("decode session partials: %w", err)
		}
		v.accs[i] = acc
		src = src[size:]
	}
	if len(src) != 0 {
		return openSessions{}, errSessionsCorrupt
	}
	return v, nil
}
