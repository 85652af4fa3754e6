package runtime

import (
	"errors"
	"fmt"
	"io"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
)

// link is one operator instance in a chain, seen by the task: its control
// side. Its data side is the typed consumer instantiate returned.
type link interface {
	open(env *openEnv) error
	// snapshot captures the operator's state for checkpoint id; persist, if
	// not nil, finishes writing keyed state and may run on another goroutine.
	snapshot(id barrier.CheckpointID, dir string) (snap state.SubtaskSnapshot, persist func() ([]state.File, error), err error)
	notifyComplete(id barrier.CheckpointID) error
	close() error
	timerHandler() TimerHandler
	// advanceWatermark fires the link's event-time timers up to w (its
	// output goes down the chain at once); the task calls it head first,
	// then forwards w.
	advanceWatermark(w int64) error
}

// openEnv is what a link needs to open: its context and, for keyed links,
// where its keyed state lives and what it restores.
type openEnv struct {
	ctx      *Context
	backends state.BackendFactory
	keyed    state.KeyedSpec
}

// operatorState turns an operator's returned state into a snapshot entry.
func operatorState(s state.OperatorState) state.SubtaskSnapshot {
	return state.SubtaskSnapshot{Lists: s.Lists, Unions: s.Unions}
}

// sourceLink drives a Source: the task calls read between control events.
type sourceLink[T any] struct {
	src       Source[T]
	out       consumer[T]
	batchSize int
	buf       []T
	onData    func() error // called before a batch is pushed (an idle task becomes active)
}

func (l *sourceLink[T]) open(env *openEnv) error {
	l.buf = make([]T, 0, l.batchSize)
	return l.src.Open(env.ctx)
}

// read reads one batch and pushes it through the chain. It returns the
// number of records and io.EOF when the source ended.
func (l *sourceLink[T]) read() (int, error) {
	b, err := l.src.Read(l.buf[:0])
	if len(b) > 0 {
		perr := l.onData()
		if perr == nil {
			perr = l.out.push(b)
		}
		if perr != nil {
			return len(b), perr
		}
	}
	clear(b)
	if err != nil && !errors.Is(err, io.EOF) {
		return len(b), fmt.Errorf("read source: %w", err)
	}
	return len(b), err
}

func (l *sourceLink[T]) snapshot(id barrier.CheckpointID, _ string) (state.SubtaskSnapshot, func() ([]state.File, error), error) {
	s, err := l.src.Snapshot(id)
	return operatorState(s), nil, err
}
func (l *sourceLink[T]) notifyComplete(id barrier.CheckpointID) error {
	return l.src.NotifyComplete(id)
}
func (l *sourceLink[T]) close() error                 { return l.src.Close() }
func (l *sourceLink[T]) timerHandler() TimerHandler   { th, _ := l.src.(TimerHandler); return th }
func (l *sourceLink[T]) advanceWatermark(int64) error { return nil }

func (l *sourceLink[T]) watermarks(onData func() error) WatermarkSource {
	l.onData = onData
	ws, _ := l.src.(WatermarkSource)
	return ws
}

// stateless is the control side of links without state.
type stateless struct{}

func (stateless) open(*openEnv) error { return nil }
func (stateless) snapshot(barrier.CheckpointID, string) (state.SubtaskSnapshot, func() ([]state.File, error), error) {
	return state.SubtaskSnapshot{}, nil, nil
}
func (stateless) notifyComplete(barrier.CheckpointID) error { return nil }
func (stateless) close() error                              { return nil }
func (stateless) timerHandler() TimerHandler                { return nil }
func (stateless) advanceWatermark(int64) error              { return nil }

// mapLink applies a function batch-wise into a reused output slice.
type mapLink[In, Out any] struct {
	stateless
	f   func(In) Out
	out consumer[Out]
	buf []Out
}

func (l *mapLink[In, Out]) push(in []In) error {
	for len(in) > 0 {
		n := min(len(in), cap(l.buf))
		out := l.buf[:n]
		for i, v := range in[:n] {
			out[i] = l.f(v)
		}
		if err := l.out.push(out); err != nil {
			return err
		}
		clear(out)
		in = in[n:]
	}
	return nil
}

// filterLink copies the kept records into a reused output slice.
type filterLink[T any] struct {
	stateless
	keep func(T) bool
	out  consumer[T]
	buf  []T
}

func (l *filterLink[T]) push(in []T) error {
	out := l.buf[:0]
	for _, v := range in {
		if l.keep(v) {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	err := l.out.push(out)
	clear(out)
	l.buf = out[:0]
	return err
}

// passLink forwards batches unchanged (union and repartition nodes).
type passLink[T any] struct {
	stateless
	out consumer[T]
}

func (l *passLink[T]) push(in []T) error { return l.out.push(in) }

// operatorLink runs a user Operator.
type operatorLink[In, Out any] struct {
	op  Operator[In, Out]
	out Collector[Out]
	ctx *Context
}

func (l *operatorLink[In, Out]) open(env *openEnv) error {
	l.ctx = env.ctx
	if err := restoreOperatorTimers(env.ctx); err != nil {
		return err
	}
	return l.op.Open(env.ctx)
}
func (l *operatorLink[In, Out]) push(in []In) error {
	if err := l.op.ProcessBatch(in, &l.out); err != nil {
		return err
	}
	return l.out.done()
}
func (l *operatorLink[In, Out]) snapshot(id barrier.CheckpointID, _ string) (state.SubtaskSnapshot, func() ([]state.File, error), error) {
	s, err := l.op.Snapshot(id)
	snap := operatorState(s)
	l.ctx.events.(*operatorTimers).save(&snap)
	return snap, nil, err
}
func (l *operatorLink[In, Out]) notifyComplete(id barrier.CheckpointID) error {
	return l.op.NotifyComplete(id)
}
func (l *operatorLink[In, Out]) close() error { return l.op.Close() }
func (l *operatorLink[In, Out]) timerHandler() TimerHandler {
	th, _ := l.op.(TimerHandler)
	return th
}

// flatMapOp adapts a flat-map function to an Operator.
type flatMapOp[In, Out any] func(In, *Collector[Out]) error

func (flatMapOp[In, Out]) Open(*Context) error { return nil }
func (f flatMapOp[In, Out]) ProcessBatch(in []In, out *Collector[Out]) error {
	for _, v := range in {
		if err := f(v, out); err != nil {
			return err
		}
	}
	return nil
}
func (flatMapOp[In, Out]) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (flatMapOp[In, Out]) NotifyComplete(barrier.CheckpointID) error { return nil }
func (flatMapOp[In, Out]) Close() error                              { return nil }

// sinkLink runs a Sink at the end of a chain.
type sinkLink[T any] struct {
	sink Sink[T]
}

func (l *sinkLink[T]) open(env *openEnv) error { return l.sink.Open(env.ctx) }
func (l *sinkLink[T]) push(in []T) error       { return l.sink.Write(in) }
func (l *sinkLink[T]) snapshot(id barrier.CheckpointID, _ string) (state.SubtaskSnapshot, func() ([]state.File, error), error) {
	s, err := l.sink.Snapshot(id)
	return operatorState(s), nil, err
}
func (l *sinkLink[T]) notifyComplete(id barrier.CheckpointID) error { return l.sink.NotifyComplete(id) }
func (l *sinkLink[T]) close() error                                 { return l.sink.Close() }
func (l *sinkLink[T]) timerHandler() TimerHandler                   { th, _ := l.sink.(TimerHandler); return th }
func (l *sinkLink[T]) advanceWatermark(w int64) error {
	if ws, ok := l.sink.(WatermarkSink); ok {
		return ws.OnWatermark(w)
	}
	return nil
}

// keyedLink runs a KeyedProcessor over keyed state.
type keyedLink[K comparable, In, Out any] struct {
	proc    KeyedProcessor[K, In, Out]
	key     func(In) K
	codec   state.Codec[K]
	out     Collector[Out]
	backend state.KeyedBackend
	keyed   *state.Keyed
	groups  state.KeyGroupRange
	timers  *EventTimers[K] // made by the processor in Open, if it uses timers
}

func (l *keyedLink[K, In, Out]) open(env *openEnv) error {
	b, err := env.backends.OpenKeyed(env.keyed)
	if err != nil {
		return fmt.Errorf("open keyed state of %q subtask %d: %w", env.ctx.Operator, env.ctx.Subtask, err)
	}
	l.backend, l.groups = b, env.keyed.KeyGroups
	l.keyed = state.NewKeyed(state.KeyedConfig{Backend: b, KeyGroups: env.keyed.KeyGroups, MaxParallelism: env.ctx.MaxParallelism})
	if err := l.proc.Open(env.ctx, l.keyed); err != nil {
		return err
	}
	return l.keyedTimers(env.ctx)
}

func (l *keyedLink[K, In, Out]) push(in []In) error {
	for _, v := range in {
		if err := l.proc.Process(l.key(v), v, &l.out); err != nil {
			return err
		}
	}
	return l.out.done()
}

func (l *keyedLink[K, In, Out]) snapshot(id barrier.CheckpointID, dir string) (state.SubtaskSnapshot, func() ([]state.File, error), error) {
	persist, err := l.keyed.Capture(id, dir)
	if err != nil {
		return state.SubtaskSnapshot{}, nil, fmt.Errorf("capture keyed state: %w", err)
	}
	return state.SubtaskSnapshot{KeyGroups: l.groups}, persist, nil
}

func (l *keyedLink[K, In, Out]) notifyComplete(barrier.CheckpointID) error { return nil }
func (l *keyedLink[K, In, Out]) close() error {
	err := l.proc.Close()
	if l.backend != nil {
		err = errors.Join(err, l.backend.Close())
	}
	return err
}
func (l *keyedLink[K, In, Out]) timerHandler() TimerHandler {
	th, _ := l.proc.(TimerHandler)
	return th
}

// reducer is the KeyedProcessor behind Reduce.
type reducer[K comparable, T any] struct {
	f   func(acc, v T) T
	kc  state.Codec[K]
	vc  state.Codec[T]
	acc *state.Value[K, T]
}

func (r *reducer[K, T]) Open(_ *Context, keyed *state.Keyed) error {
	r.acc = state.NewValue(keyed, "reduce", r.kc, r.vc)
	return nil
}

func (r *reducer[K, T]) Process(k K, v T, out *Collector[T]) error {
	acc, ok, err := r.acc.Get(k)
	if err != nil {
		return err
	}
	if ok {
		v = r.f(acc, v)
	}
	if err := r.acc.Put(k, v); err != nil {
		return err
	}
	out.Emit(v)
	return nil
}

func (r *reducer[K, T]) Close() error { return nil }
