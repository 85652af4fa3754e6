package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/chaos"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
)

// firing is one OnEventTime call and the watermark it saw.
type firing struct {
	key    uint64
	at, wm int64
}

// timerProbe registers, for each record, a timer of its key at its event
// time plus 100; key 99's timer is deleted again at once.
type timerProbe struct {
	ctx    *runtime.Context
	timers *runtime.EventTimers[uint64]
	mu     *sync.Mutex
	fired  *[]firing
}

func (p *timerProbe) Open(ctx *runtime.Context, keyed *state.Keyed) (err error) {
	p.ctx = ctx
	p.timers, err = runtime.NewEventTimers(ctx, keyed, state.Uint64Codec{})
	return err
}

func (p *timerProbe) Process(key uint64, e operators.Event, _ *runtime.Collector[operators.Event]) error {
	if err := p.timers.Register(key, e.Time+100); err != nil {
		return err
	}
	if key == 99 {
		return p.timers.Delete(key, e.Time+100)
	}
	return nil
}

func (p *timerProbe) OnEventTime(key uint64, at int64, out *runtime.Collector[operators.Event]) error {
	p.mu.Lock()
	*p.fired = append(*p.fired, firing{key: key, at: at, wm: p.ctx.Watermark()})
	p.mu.Unlock()
	out.Emit(operators.Event{Key: key, Time: at})
	return nil
}

func (p *timerProbe) Close() error { return nil }

// TestEventTimersFireWhenWatermarkPasses: a timer fires once the watermark
// reaches its time, not a nanosecond before; timers of one time fire in key
// order; a deleted timer and a registration repeated fire nothing extra.
func TestEventTimersFireWhenWatermarkPasses(t *testing.T) {
	f := newFeed(1, 0)
	var mu sync.Mutex
	var fired []firing
	j := runtime.NewJob(runtime.Options{Name: "timers", WatermarkInterval: time.Millisecond})
	src := runtime.FromSource(j, "feed", f.source)
	ks := runtime.KeyBy(src, func(e operators.Event) uint64 { return e.Key }, state.Uint64Codec{})
	out := runtime.Process(ks, "timers", func() runtime.KeyedProcessor[uint64, operators.Event, operators.Event] {
		return &timerProbe{mu: &mu, fired: &fired}
	})
	runtime.SinkTo(out, "discard", operators.NewDiscard[operators.Event](nil))
	done := make(chan error, 1)
	go func() { done <- j.Run(context.Background()) }()

	snapshot := func() []firing {
		mu.Lock()
		defer mu.Unlock()
		return append([]firing(nil), fired...)
	}
	for _, r := range []rec{{ts: 0, key: 2}, {ts: 0, key: 1}, {ts: 0, key: 3}, {ts: 0, key: 2}, {ts: 0, key: 99}, {ts: 50, key: 1}} {
		f.chans[0] <- r
	}
	f.chans[0] <- rec{ts: 100, key: 7} // watermark 99: nothing due yet
	awaitTasks(t, j, "timers", -1, "at 99", wmIs(99))
	if got := snapshot(); len(got) != 0 {
		t.Fatalf("timers fired at watermark 99, before their time 100: %v", got)
	}
	f.chans[0] <- rec{ts: 101, key: 7} // watermark 100
	awaitTasks(t, j, "timers", -1, "at 100", wmIs(100))
	want := []firing{{key: 1, at: 100, wm: 100}, {key: 2, at: 100, wm: 100}, {key: 3, at: 100, wm: 100}}
	if got := snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("at watermark 100 fired %v, want %v (key order, key 99 deleted, key 2 once)", got, want)
	}
	f.chans[0] <- rec{ts: 1000, key: 7} // watermark 999: 150 (key 1), 200 and 201 (key 7)
	awaitTasks(t, j, "timers", -1, "at 999", wmIs(999))
	want = append(want, firing{key: 1, at: 150, wm: 999}, firing{key: 7, at: 200, wm: 999}, firing{key: 7, at: 201, wm: 999})
	if got := snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("at watermark 999 fired %v, want %v (time order)", got, want)
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := snapshot(); len(got) != len(want) {
		t.Fatalf("a stop fired timers: %v (a stop is not the end of event time)", got[len(want):])
	}
}

// watermarkProbe records each OnWatermark call (at, the argument; wm, its
// Context's watermark then).
type watermarkProbe struct {
	ctx   *runtime.Context
	mu    *sync.Mutex
	calls *[]firing
}

func (p *watermarkProbe) Open(ctx *runtime.Context, _ *state.Keyed) error {
	p.ctx = ctx
	return nil
}

func (p *watermarkProbe) Process(uint64, operators.Event, *runtime.Collector[operators.Event]) error {
	return nil
}

func (p *watermarkProbe) OnWatermark(w int64, out *runtime.Collector[operators.Event]) error {
	p.mu.Lock()
	*p.calls = append(*p.calls, firing{at: w, wm: p.ctx.Watermark()})
	p.mu.Unlock()
	out.Emit(operators.Event{Time: w})
	return nil
}

func (p *watermarkProbe) Close() error { return nil }

// TestKeyedOnWatermark: a keyed processor that implements
// WatermarkProcessor hears every advance of its watermark, in order, once
// each, with its Context already there.
func TestKeyedOnWatermark(t *testing.T) {
	f := newFeed(1, 0)
	var mu sync.Mutex
	var calls []firing
	j := runtime.NewJob(runtime.Options{Name: "onwatermark", WatermarkInterval: time.Millisecond})
	src := runtime.FromSource(j, "feed", f.source)
	ks := runtime.KeyBy(src, func(e operators.Event) uint64 { return e.Key }, state.Uint64Codec{})
	out := runtime.Process(ks, "probe", func() runtime.KeyedProcessor[uint64, operators.Event, operators.Event] {
		return &watermarkProbe{mu: &mu, calls: &calls}
	})
	runtime.SinkTo(out, "discard", operators.NewDiscard[operators.Event](nil))
	done := make(chan error, 1)
	go func() { done <- j.Run(context.Background()) }()
	for _, ts := range []int64{100, 101, 1000} {
		f.chans[0] <- rec{ts: ts, key: 1}
		awaitTasks(t, j, "probe", -1, fmt.Sprint("at ", ts-1), wmIs(ts-1))
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[int64]bool{}
	for i, c := range calls {
		if c.wm != c.at || (i > 0 && c.at <= calls[i-1].at) {
			t.Fatalf("calls %v: each must come with its Context there, in increasing order", calls)
		}
		seen[c.at] = true
	}
	if !seen[99] || !seen[100] || !seen[999] {
		t.Fatalf("calls %v: want 99, 100 and 999 among them", calls)
	}
}

// windowSize is the tumbling window of the windowed test job (event time).
const windowSize = int64(time.Second)

// seqTime is the event time of sequence number seq: a millisecond per
// record, each up to 20ms late against its order (within the bound).
func seqTime(seq uint64) int64 {
	return int64(seq)*int64(time.Millisecond) + int64(seq*7919%21)*int64(time.Millisecond)
}

// windower counts and sums each key's records per tumbling window of event
// time and emits the window when the watermark passes its end: Key, Seq =
// window end, Value = sum, Time = count.
type windower struct {
	ctx    *runtime.Context
	timers *runtime.EventTimers[uint64]
	acc    *state.Map[uint64, int64, operators.Event]
	late   *atomic.Int64
}

func (w *windower) Open(ctx *runtime.Context, keyed *state.Keyed) (err error) {
	w.ctx = ctx
	w.acc = state.NewMap(keyed, "windows", state.Uint64Codec{}, state.Int64Codec{}, state.Codec[operators.Event](state.JSONCodec[operators.Event]{}))
	w.timers, err = runtime.NewEventTimers(ctx, keyed, state.Uint64Codec{})
	return err
}

func (w *windower) Process(key uint64, e operators.Event, _ *runtime.Collector[operators.Event]) error {
	if e.Time <= w.ctx.Watermark() {
		w.late.Add(1)
		return nil
	}
	end := (e.Time/windowSize + 1) * windowSize
	acc, _, err := w.acc.Get(key, end)
	if err != nil {
		return err
	}
	acc.Seq++
	acc.Value += e.Value
	if err := w.acc.Put(key, end, acc); err != nil {
		return err
	}
	return w.timers.Register(key, end-1)
}

func (w *windower) OnEventTime(key uint64, at int64, out *runtime.Collector[operators.Event]) error {
	end := at + 1
	acc, ok, err := w.acc.Get(key, end)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("timer of key %d at %d without its window", key, at)
	}
	out.Emit(operators.Event{Key: key, Seq: uint64(end), Value: acc.Value, Time: int64(acc.Seq)})
	return w.acc.Delete(key, end)
}

func (w *windower) Close() error { return nil }

// windowModel is the answer: per (key, window end) the sum and count.
func windowModel(count, keys uint64) map[[2]uint64][2]int64 {
	m := map[[2]uint64][2]int64{}
	for seq := range count {
		k := [2]uint64{operators.KeyOf(seq, keys), uint64((seqTime(seq)/windowSize + 1) * windowSize)}
		v := m[k]
		m[k] = [2]int64{v[0] + operators.ValueOf(seq), v[1] + 1}
	}
	return m
}

// checkWindows compares the committed windows with the model: each once,
// with its exact sum and count.
func checkWindows(out string, count, keys uint64) error {
	got, err := operators.ReadCommitted(out, state.Codec[operators.Event](state.JSONCodec[operators.Event]{}))
	if err != nil {
		return err
	}
	want := windowModel(count, keys)
	seen := map[[2]uint64]bool{}
	var errs []error
	for _, e := range got {
		k := [2]uint64{e.Key, e.Seq}
		w, ok := want[k]
		switch {
		case seen[k]:
			errs = append(errs, fmt.Errorf("window %v emitted twice", k))
		case !ok:
			errs = append(errs, fmt.Errorf("window %v not in the input", k))
		case w != [2]int64{e.Value, e.Time}:
			errs = append(errs, fmt.Errorf("window %v: sum %d count %d, want %d and %d", k, e.Value, e.Time, w[0], w[1]))
		}
		seen[k] = true
	}
	if len(seen) != len(want) {
		errs = append(errs, fmt.Errorf("%d windows emitted, want %d", len(seen), len(want)))
	}
	if len(errs) > 5 {
		errs = errs[:5]
	}
	return errors.Join(errs...)
}

// windowJob is sequence (event time) → [chaos] → keyBy → windower (one more
// subtask than the source) → two-phase collecting sink.
type windowJob struct {
	count, keys uint64
	srcPar      int
	faults      *chaos.Faults // nil: none
	late        atomic.Int64
}

func (w *windowJob) build(j *runtime.Job, out string) {
	seq := operators.NewSequence(operators.SequenceConfig{Count: w.count, Keys: w.keys,
		EventTime: seqTime, MaxOutOfOrderness: 20 * time.Millisecond})
	src := chaos.Source(j, "sequence", seq, w.srcPar, 1500/w.srcPar, w.faults)
	ks := runtime.KeyBy(src, func(e operators.Event) uint64 { return e.Key }, state.Uint64Codec{})
	wins := runtime.Process(ks, "windows", func() runtime.KeyedProcessor[uint64, operators.Event, operators.Event] {
		return &windower{late: &w.late}
	}, runtime.WithParallelism(w.srcPar+1))
	runtime.SinkTo(wins, "collect", chaos.Sinks(operators.NewCollectSink(out, state.Codec[operators.Event](state.JSONCodec[operators.Event]{})), w.faults),
		runtime.WithParallelism(w.srcPar))
}

func (w *windowJob) options(dir string) runtime.Options {
	return chaos.JobOptions("windows", dir, w.faults)
}

// TestEventTimeWindowsExactlyOnce is the determinism oracle of event time:
// tumbling windows fired by event-time timers, computed from out-of-order
// input across several source subtasks and a keyBy to another parallelism,
// equal the model exactly, uninterrupted and with faults that restart the
// job in-process from its checkpoints (timers, watermarks and the sources'
// per-split event time restored). No record is ever late: the watermark
// never overtakes the records it covers, a restore included.
func TestEventTimeWindowsExactlyOnce(t *testing.T) {
	const count, keys = 60_000, 50
	for _, tc := range []struct {
		par    int
		faults bool
	}{{2, false}, {1, true}, {3, true}} {
		t.Run(fmt.Sprintf("p=%d/faults=%v", tc.par, tc.faults), func(t *testing.T) {
			s := seed(t)
			w := &windowJob{count: count, keys: keys, srcPar: tc.par}
			if tc.faults {
				w.faults = chaos.New(s, 3)
			}
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			j := runtime.NewJob(w.options(dir))
			w.build(j, out)
			if err := j.Run(t.Context()); err != nil {
				t.Fatalf("seed %d: run: %v", s, err)
			}
			if w.faults != nil {
				t.Logf("seed %d: %d faults injected", s, w.faults.Total())
				if w.faults.Total() < tc.par {
					t.Fatalf("seed %d: only %d faults: the test proves nothing", s, w.faults.Total())
				}
			}
			if err := checkWindows(out, count, keys); err != nil {
				t.Fatalf("seed %d: %v", s, err)
			}
			if n := w.late.Load(); n != 0 {
				t.Fatalf("seed %d: %d records late, want none (the disorder is within the bound)", s, n)
			}
			for _, ts := range j.Status().Tasks {
				if got := watermark.FromTime(ts.Watermark); got != watermark.Max {
					t.Fatalf("%s (%d) ended at watermark %s, want the end of event time", ts.Chain, ts.Subtask, watermark.Format(got))
				}
			}
		})
	}
}

// TestEventTimeWindowsAcrossRescale stops the windowed job midway and
// restores it at other parallelisms: timers move with their key groups,
// the sources' splits with their event time, and the windows stay exact.
func TestEventTimeWindowsAcrossRescale(t *testing.T) {
	const count, keys = 60_000, 50
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var stops atomic.Int32
	for _, par := range []int{2, 3, 1} {
		w := &windowJob{count: count, keys: keys, srcPar: par}
		opts := w.options(dir)
		var j *runtime.Job
		var once sync.Once
		completed := 0
		if par != 1 { // the last run goes to the end
			opts.Listener = func(ev runtime.Event) {
				if ev.Kind == runtime.EventCheckpointCompleted {
					if completed++; completed == 10 {
						once.Do(func() { stops.Add(1); go j.Stop() })
					}
				}
			}
		}
		seq := operators.SequenceConfig{Count: count, Keys: keys, EventTime: seqTime, MaxOutOfOrderness: 20 * time.Millisecond}
		j = runtime.NewJob(opts)
		// At most 500 records per subtask between barriers: the runs take
		// dozens of checkpoints whatever the machine, and stop at the 10th.
		src := runtime.FromSource(j, "sequence", chaos.PerCheckpoint(operators.NewSequence(seq), 500), runtime.WithParallelism(par))
		ks := runtime.KeyBy(src, func(e operators.Event) uint64 { return e.Key }, state.Uint64Codec{})
		wins := runtime.Process(ks, "windows", func() runtime.KeyedProcessor[uint64, operators.Event, operators.Event] {
			return &windower{late: &w.late}
		}, runtime.WithParallelism(par+1))
		runtime.SinkTo(wins, "collect", operators.NewCollectSink(out, state.Codec[operators.Event](state.JSONCodec[operators.Event]{})), runtime.WithParallelism(par))
		if err := j.Run(t.Context()); err != nil {
			t.Fatalf("run at p=%d: %v", par, err)
		}
		if n := w.late.Load(); n != 0 {
			t.Fatalf("p=%d: %d records late after the restore, want none", par, n)
		}
	}
	if stops.Load() != 2 {
		t.Fatalf("%d runs stopped midway, want 2", stops.Load())
	}
	if err := checkWindows(out, count, keys); err != nil {
		t.Fatal(err)
	}
}

// windowEnds registers, as an operator, a timer half a second after the
// end of each record's tumbling window and emits the window end when it
// fires: at most barriers some timer waits whose records are all before it.
type windowEnds struct {
	ctx *runtime.Context
}

func (w *windowEnds) Open(ctx *runtime.Context) error { w.ctx = ctx; return nil }
func (w *windowEnds) ProcessBatch(in []operators.Event, _ *runtime.Collector[operators.Event]) error {
	for _, e := range in {
		w.ctx.RegisterEventTimer((e.Time/windowSize+1)*windowSize + windowSize/2)
	}
	return nil
}
func (w *windowEnds) OnEventTime(at int64, out *runtime.Collector[operators.Event]) error {
	if at > w.ctx.Watermark() {
		return fmt.Errorf("timer %d fired at watermark %d", at, w.ctx.Watermark())
	}
	out.Emit(operators.Event{Seq: uint64(at - windowSize/2)})
	return nil
}
func (w *windowEnds) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (w *windowEnds) NotifyComplete(barrier.CheckpointID) error { return nil }
func (w *windowEnds) Close() error                              { return nil }

// TestOperatorEventTimersRestored: an operator's own event-time timers are
// checkpointed with its state; with faults restarting the job, every
// window end fires exactly once.
func TestOperatorEventTimersRestored(t *testing.T) {
	const count = 40_000
	s := seed(t)
	f := chaos.New(s, 3)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	w := &windowJob{srcPar: 2, faults: f}
	j := runtime.NewJob(w.options(dir))
	seq := operators.NewSequence(operators.SequenceConfig{Count: count, EventTime: seqTime, MaxOutOfOrderness: 20 * time.Millisecond})
	src := runtime.FromSource(j, "sequence", chaos.PerCheckpoint(seq, 500), runtime.WithParallelism(2))
	src = chaos.Operator(src, "chaos", f)
	one := runtime.Rebalance(src, "one", runtime.WithParallelism(1))
	ends := runtime.Apply(one, "ends", func() runtime.Operator[operators.Event, operators.Event] { return &windowEnds{} }, runtime.WithParallelism(1))
	codec := state.Codec[operators.Event](state.JSONCodec[operators.Event]{})
	runtime.SinkTo(ends, "collect", func() runtime.Sink[operators.Event] {
		return chaos.Sink(operators.NewCollectSink(out, codec)(), f)
	}, runtime.WithParallelism(1))
	if err := j.Run(t.Context()); err != nil {
		t.Fatalf("seed %d: %v", s, err)
	}
	if f.Total() < 2 {
		t.Fatalf("seed %d: only %d faults: the test proves nothing", s, f.Total())
	}
	got, err := operators.ReadCommitted(out, codec)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]bool{}
	for seq := range uint64(count) {
		want[uint64((seqTime(seq)/windowSize+1)*windowSize)] = true
	}
	seen := map[uint64]int{}
	for _, e := range got {
		seen[e.Seq]++
	}
	for end := range want {
		if seen[end] != 1 {
			t.Fatalf("seed %d: window end %d fired %d times, want once (%d faults)", s, end, seen[end], f.Total())
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("seed %d: %d window ends fired, want %d", s, len(seen), len(want))
	}
}
