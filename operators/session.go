package operators

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
)

// SessionConfig configures SessionWindows: the gap, the lateness, the emit
// mode, and how records become partial aggregates of type A.
type SessionConfig[T, A any] struct {
	// Gap: records of a key less than Gap apart in event time are one
	// session (watermark.Sessions).
	Gap time.Duration
	// Lateness is the allowed lateness: a session [start, end) closes when
	// the watermark reaches end - 1ns + Lateness, and a record at t is late
	// once the watermark reached t + Lateness (it could belong to a session
	// that closed).
	Lateness time.Duration
	// Final emits each session once, when it closes; otherwise a session's
	// changes are emitted as its records arrive (SessionEvent).
	Final bool
	// EventTime returns a record's event time (Unix nanoseconds, package
	// watermark).
	EventTime func(T) int64
	// Partial returns a record's partial aggregate, Combine combines two
	// (b after a; the result must not alias them, which the state and
	// downstream batches may hold). A merge combines whole sessions, whose
	// records interleaved in arrival order: Combine must be commutative and
	// associative for the result not to depend on it.
	Partial func(T) (A, error)
	Combine func(a, b A) (A, error)
	// Codec stores a partial aggregate in the keyed state.
	Codec state.Codec[A]
	// LateLabels label the counter of late records,
	// ebbflow_late_records_total; EmitLate emits them (SessionEvent.Late)
	// instead of dropping them.
	LateLabels prometheus.Labels
	EmitLate   bool
}

// SessionEvent is what SessionWindows emits for a key:
//
//   - Final: a closed session and the partial aggregate of all its records,
//     once;
//   - updates: Acc to add to the session's row (a record's partial when it
//     falls inside a session; when it opens, extends or merges sessions,
//     the whole new session's after a Clear of each session it replaced);
//   - Clear: the row of Session is to be removed (merged into another);
//   - a late record (Late set, with the reason), when EmitLate.
type SessionEvent[K, T, A any] struct {
	Key     K
	Session watermark.Session
	Acc     A
	Clear   bool
	Late    error
	Record  T // the late record
}

// SessionWindows aggregates the records of each key of ks into session
// windows of event time. Per key, the keyed state "sessions" holds the
// open sessions (disjoint, by start) with their partial aggregates, and an
// event-time timer is set at each one's close: checkpointed, restored and
// rescaled by key group with the job, so a restore replays to the same
// merges and firings. A record that is not late makes the window [t,
// t+Gap), merged with the open sessions it overlaps; a session that closed
// can no longer grow, as a record that could reach it is late.
func SessionWindows[K comparable, T, A any](ks runtime.KeyedStream[K, T], name string, cfg SessionConfig[T, A], opts ...runtime.NodeOption) (runtime.Stream[SessionEvent[K, T, A]], error) {
	if err := (watermark.Sessions{Gap: cfg.Gap}).Check(); err != nil {
		return runtime.Stream[SessionEvent[K, T, A]]{}, fmt.Errorf("session windows %q: %w", name, err)
	}
	switch {
	case cfg.Lateness < 0:
		return runtime.Stream[SessionEvent[K, T, A]]{}, fmt.Errorf("session windows %q: lateness %s is negative", name, cfg.Lateness)
	case cfg.EventTime == nil || cfg.Partial == nil || cfg.Combine == nil || cfg.Codec == nil:
		return runtime.Stream[SessionEvent[K, T, A]]{}, fmt.Errorf("session windows %q: EventTime, Partial, Combine and Codec are required", name)
	}
	kc := ks.Codec()
	return runtime.Process(ks, name, func() runtime.KeyedProcessor[K, T, SessionEvent[K, T, A]] {
		return &sessioner[K, T, A]{cfg: cfg, kc: kc, sessions: watermark.Sessions{Gap: cfg.Gap}}
	}, opts...), nil
}

// openSessions is the state of one key: its open sessions, by start, and
// the partial aggregate of each.
type openSessions[A any] struct {
	spans []watermark.Session
	accs  []A
}

// sessioner is one subtask of SessionWindows.
type sessioner[K comparable, T, A any] struct {
	cfg      SessionConfig[T, A]
	kc       state.Codec[K]
	sessions watermark.Sessions
	ctx      *runtime.Context
	open     *state.Value[K, openSessions[A]]
	timers   *runtime.EventTimers[K]
	late     prometheus.Counter
}

func (s *sessioner[K, T, A]) Open(ctx *runtime.Context, keyed *state.Keyed) error {
	s.ctx = ctx
	s.open = state.NewValue(keyed, "sessions", s.kc, state.Codec[openSessions[A]](sessionsCodec[A]{s.cfg.Codec}))
	var err error
	if s.timers, err = runtime.NewEventTimers(ctx, keyed, s.kc); err != nil {
		return err
	}
	s.late = prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_late_records_total",
		Help:        "Records that came after their window closed (the watermark passed its end plus allowed_lateness), by the window's late policy.",
		ConstLabels: s.cfg.LateLabels})
	if err := ctx.Registerer.Register(s.late); err != nil {
		return fmt.Errorf("register session metrics: %w", err)
	}
	return nil
}

// closesAt is when the session ending at end closes.
func (s *sessioner[K, T, A]) closesAt(end int64) int64 { return end - 1 + int64(s.cfg.Lateness) }

func (s *sessioner[K, T, A]) Process(key K, v T, out *runtime.Collector[SessionEvent[K, T, A]]) error {
	at := s.cfg.EventTime(v)
	if wm := s.ctx.Watermark(); at+int64(s.cfg.Lateness) <= wm {
		s.late.Inc()
		if s.cfg.EmitLate {
			out.Emit(SessionEvent[K, T, A]{Key: key, Record: v, Late: fmt.Errorf("its time %s is at or before watermark %s minus the allowed lateness %s (its session may have closed)",
				watermark.Format(at), watermark.Format(wm), s.cfg.Lateness)})
		}
		return nil
	}
	in, err := s.cfg.Partial(v)
	if err != nil {
		return err
	}
	st, _, err := s.open.Get(key)
	if err != nil {
		return err
	}
	merged, lo, hi := s.sessions.Assign(st.spans, at)
	if hi == lo+1 && st.spans[lo] == merged { // inside one session: its bounds stay
		if st.accs[lo], err = s.cfg.Combine(st.accs[lo], in); err != nil {
			return err
		}
		if !s.cfg.Final {
			out.Emit(SessionEvent[K, T, A]{Key: key, Session: merged, Acc: in})
		}
		return s.open.Put(key, st)
	}
	acc := in
	for i := hi - 1; i >= lo; i-- {
		if acc, err = s.cfg.Combine(st.accs[i], acc); err != nil {
			return err
		}
		if err := s.timers.Delete(key, s.closesAt(st.spans[i].End)); err != nil {
			return err
		}
		if !s.cfg.Final {
			out.Emit(SessionEvent[K, T, A]{Key: key, Session: st.spans[i], Clear: true})
		}
	}
	if !s.cfg.Final {
		out.Emit(SessionEvent[K, T, A]{Key: key, Session: merged, Acc: acc})
	}
	st.spans = slices.Replace(st.spans, lo, hi, merged)
	st.accs = slices.Replace(st.accs, lo, hi, acc)
	if err := s.open.Put(key, st); err != nil {
		return err
	}
	return s.timers.Register(key, s.closesAt(merged.End))
}

// OnEventTime closes the session of key whose close is at: Final emits it,
// once; both modes forget it.
func (s *sessioner[K, T, A]) OnEventTime(key K, at int64, out *runtime.Collector[SessionEvent[K, T, A]]) error {
	st, _, err := s.open.Get(key)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(st.spans, func(w watermark.Session) bool { return s.closesAt(w.End) == at })
	if i < 0 {
		return errors.New("session windows: a session's timer without its session")
	}
	if s.cfg.Final {
		out.Emit(SessionEvent[K, T, A]{Key: key, Session: st.spans[i], Acc: st.accs[i]})
	}
	if len(st.spans) == 1 {
		return s.open.Delete(key)
	}
	st.spans = slices.Delete(st.spans, i, i+1)
	st.accs = slices.Delete(st.accs, i, i+1)
	return s.open.Put(key, st)
}

func (s *sessioner[K, T, A]) Close() error { return nil }

// sessionsCodec stores a key's open sessions: their number, then per
// session its start, end, and its partial aggregate's length and bytes.
type sessionsCodec[A any] struct{ acc state.Codec[A] }

func (c sessionsCodec[A]) Append(dst []byte, v openSessions[A]) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v.spans)))
	var acc []byte
	for i, s := range v.spans {
		acc = c.acc.Append(acc[:0], v.accs[i])
		dst = binary.AppendVarint(dst, s.Start)
		dst = binary.AppendVarint(dst, s.End)
		dst = binary.AppendUvarint(dst, uint64(len(acc)))
		dst = append(dst, acc...)
	}
	return dst
}

var errSessionsCorrupt = errors.New("operators: corrupt session state")

func (c sessionsCodec[A]) Decode(src []byte) (openSessions[A], error) {
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
		return openSessions[A]{}, errSessionsCorrupt
	}
	v := openSessions[A]{spans: make([]watermark.Session, n), accs: make([]A, n)}
	for i := range v.spans {
		v.spans[i] = watermark.Session{Start: varint(), End: varint()}
		size := uvarint()
		if bad {
			return openSessions[A]{}, errSessionsCorrupt
		}
		acc, err := c.acc.Decode(src[:size])
		if err != nil {
			return openSessions[A]{}, fmt.Errorf("decode session partials: %w", err)
		}
		v.accs[i] = acc
		src = src[size:]
	}
	if len(src) != 0 {
		return openSessions[A]{}, errSessionsCorrupt
	}
	return v, nil
}
