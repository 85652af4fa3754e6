package runtime_test

import (
	"context"
	"fmt"
	"strings"
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
	"github.com/prometheus/client_golang/prometheus"
)

// feed drives a test source by hand: subtask i reads the records sent on
// chans[i], with one split, bound 0 (a record at t
// gives watermark t-1) and the given idle timeout. With beat[i] set, a
// subtask without input emits a record at its split's largest event time
// on every Read: it stays active without advancing.
type feed struct {
	chans []chan rec
	beat  []atomic.Bool
	idle  time.Duration
	seq   atomic.Uint64
}

// rec is one record sent to a feed, at event time ts. The probe checks that
// a record not marked late never arrives at or behind its watermark.
type rec struct {
	ts   int64
	late bool
	key  uint64
}

func at(ts int64) rec   { return rec{ts: ts} }
func late(ts int64) rec { return rec{ts: ts, late: true} }

func newFeed(subtasks int, idle time.Duration) *feed {
	f := &feed{chans: make([]chan rec, subtasks), beat: make([]atomic.Bool, subtasks), idle: idle}
	for i := range f.chans {
		f.chans[i] = make(chan rec, 64)
	}
	return f
}

func (f *feed) source() runtime.Source[operators.Event] { return &feedSource{f: f} }

type feedSource struct {
	f   *feed
	sub int
	wms *watermark.Splits
	sp  *watermark.Split
}

func (s *feedSource) Open(ctx *runtime.Context) error {
	s.sub = ctx.Subtask
	s.wms = watermark.NewSplits(0, s.f.idle)
	s.sp = s.wms.Add(watermark.Min, time.Now())
	return nil
}

// Read marks the records on time with Value 1; heartbeats are not checked
// (behind a reactivated subtask they are late like any of its records).
func (s *feedSource) Read(buf []operators.Event) ([]operators.Event, error) {
	emit := func(r rec) {
		v := int64(1)
		if r.late {
			v = 0
		}
		s.sp.Observe(r.ts)
		buf = append(buf, operators.Event{Seq: s.f.seq.Add(1), Key: r.key, Value: v, Time: r.ts})
	}
	select {
	case r := <-s.f.chans[s.sub]:
		emit(r)
	case <-time.After(2 * time.Millisecond):
		if s.f.beat[s.sub].Load() && s.sp.Max() != watermark.Min {
			emit(late(s.sp.Max()))
		}
	}
	return buf, nil
}

func (s *feedSource) Watermark(now time.Time) (int64, bool) { return s.wms.Current(now) }
func (s *feedSource) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (s *feedSource) NotifyComplete(barrier.CheckpointID) error { return nil }
func (s *feedSource) Close() error                              { return nil }

// probe checks, at every batch, that its operator's watermark never goes
// back and that no record marked on time arrives at or behind it.
type probe struct {
	mu     sync.Mutex
	errs   []string
	ctx    *runtime.Context
	last   int64
	shared *probe
	// beats counts, per subtask, the heartbeats (records not on time) at
	// or after event time beatsFrom that reached it (in shared).
	beats     map[int]int
	beatsFrom atomic.Int64
}

// beatsSeen returns how many heartbeats at or after beatsFrom the
// subtask that saw the fewest of the n saw.
func (p *probe) beatsSeen(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	least := -1
	for i := range n {
		if c := p.beats[i]; least < 0 || c < least {
			least = c
		}
	}
	return least
}

func (p *probe) fail(format string, args ...any) {
	p.shared.mu.Lock()
	defer p.shared.mu.Unlock()
	if len(p.shared.errs) < 10 {
		p.shared.errs = append(p.shared.errs, fmt.Sprintf(format, args...))
	}
}

func (p *probe) check(e operators.Event) {
	w := p.ctx.Watermark()
	if w < p.last {
		p.fail("%s: watermark went back from %s to %s", p.ctx.Operator, watermark.Format(p.last), watermark.Format(w))
	}
	p.last = w
	if from := p.shared.beatsFrom.Load(); e.Value == 0 && from > 0 && e.Time >= from {
		p.shared.mu.Lock()
		if p.shared.beats == nil {
			p.shared.beats = map[int]int{}
		}
		p.shared.beats[p.ctx.Subtask]++
		p.shared.mu.Unlock()
	}
	if e.Value == 1 && e.Time <= w {
		p.fail("%s: on-time record at %d arrived behind watermark %s", p.ctx.Operator, e.Time, watermark.Format(w))
	}
}

func (p *probe) verdict(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.errs) > 0 {
		t.Fatalf("probe: %s", strings.Join(p.errs, "; "))
	}
}

func (p *probe) Open(ctx *runtime.Context) error { p.ctx, p.last = ctx, watermark.Min; return nil }
func (p *probe) ProcessBatch(in []operators.Event, out *runtime.Collector[operators.Event]) error {
	for _, e := range in {
		p.check(e)
		out.Emit(e)
	}
	return nil
}
func (p *probe) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (p *probe) NotifyComplete(barrier.CheckpointID) error { return nil }
func (p *probe) Close() error                              { return nil }

func (p *probe) factory() func() runtime.Operator[operators.Event, operators.Event] {
	return func() runtime.Operator[operators.Event, operators.Event] { return &probe{shared: p} }
}

// feedJob is feed (p=2) → rebalance (p=3) → probe → discard, watermarks
// polled every millisecond.
func feedJob(t *testing.T, f *feed, p *probe) (*runtime.Job, *prometheus.Registry, func()) {
	t.Helper()
	reg := newRegistry()
	j := runtime.NewJob(runtime.Options{Name: "wm", WatermarkInterval: time.Millisecond, Registerer: reg})
	src := runtime.FromSource(j, "feed", f.source, runtime.WithParallelism(len(f.chans)))
	spread := runtime.Rebalance(src, "spread", runtime.WithParallelism(3))
	checked := runtime.Apply(spread, "probe", p.factory(), runtime.WithParallelism(3))
	runtime.SinkTo(checked, "discard", operators.NewDiscard[operators.Event](nil), runtime.WithParallelism(3))
	done := make(chan error, 1)
	go func() { done <- j.Run(context.Background()) }()
	return j, reg, func() {
		j.Stop()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the job did not stop")
		}
	}
}

// awaitTasks waits until every subtask of the chain whose name starts with
// prefix satisfies ok (subtask -1: all of them), or fails with the status.
func awaitTasks(t *testing.T, j *runtime.Job, prefix string, subtask int, what string, ok func(runtime.TaskStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := j.Status()
		all, n := true, 0
		for _, ts := range st.Tasks {
			if !strings.HasPrefix(ts.Chain, prefix) || subtask >= 0 && ts.Subtask != subtask {
				continue
			}
			n++
			all = all && ok(ts)
		}
		if n > 0 && all {
			return
		}
		if time.Now().After(deadline) {
			var sb strings.Builder
			for _, ts := range st.Tasks {
				fmt.Fprintf(&sb, "\n  %s (%d): watermark %s idle %v", ts.Chain, ts.Subtask, watermark.Format(watermark.FromTime(ts.Watermark)), ts.WatermarkIdle)
			}
			t.Fatalf("timed out waiting for %s (subtask %d) %s:%s", prefix, subtask, what, sb.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func wmIs(w int64) func(runtime.TaskStatus) bool {
	return func(ts runtime.TaskStatus) bool { return watermark.FromTime(ts.Watermark) == w }
}

func assertWatermark(t *testing.T, j *runtime.Job, prefix string, w int64) {
	t.Helper()
	for _, ts := range j.Status().Tasks {
		if strings.HasPrefix(ts.Chain, prefix) && watermark.FromTime(ts.Watermark) != w {
			t.Fatalf("%s (%d): watermark %s, want %s", ts.Chain, ts.Subtask, watermark.Format(watermark.FromTime(ts.Watermark)), watermark.Format(w))
		}
	}
}

// TestWatermarkIsMinOfInputs: downstream of two source subtasks, across a
// rebalance to three subtasks, the watermark is the minimum of the two and
// follows whichever is behind.
func TestWatermarkIsMinOfInputs(t *testing.T) {
	f, p := newFeed(2, 0), &probe{}
	p.shared = p
	j, reg, stop := feedJob(t, f, p)
	f.chans[0] <- at(1000)
	f.chans[1] <- at(100)
	awaitTasks(t, j, "feed", 0, "at 999", wmIs(999))
	awaitTasks(t, j, "feed", 1, "at 99", wmIs(99))
	awaitTasks(t, j, "spread", -1, "at 99", wmIs(99))

	f.chans[0] <- at(5000)
	awaitTasks(t, j, "feed", 0, "at 4999", wmIs(4999))
	assertWatermark(t, j, "spread", 99) // subtask 1 still holds it back

	f.chans[1] <- at(3000)
	awaitTasks(t, j, "spread", -1, "at 2999", wmIs(2999))
	f.chans[1] <- at(6000)
	awaitTasks(t, j, "spread", -1, "at 4999 (subtask 0 now behind)", wmIs(4999))
	stop()
	p.verdict(t)
	// A stop is no end of input: event time does not jump to the end.
	assertWatermark(t, j, "spread", 4999)
	for sub, want := range []float64{4999e-9, 4999e-9, 4999e-9} {
		if got := watermarkGauge(t, reg, "spread", sub); got != want {
			t.Fatalf("ebbflow_task_watermark_seconds of spread %d = %v, want %v", sub, got, want)
		}
	}
	if got := watermarkGauge(t, reg, "feed", 1); got != 5999e-9 {
		t.Fatalf("ebbflow_task_watermark_seconds of feed 1 = %v, want 5999e-9", got)
	}
}

// watermarkGauge returns ebbflow_task_watermark_seconds of a subtask.
func watermarkGauge(t *testing.T, reg *prometheus.Registry, op string, sub int) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ebbflow_task_watermark_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["operator"] == op && labels["subtask"] == fmt.Sprint(sub) {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no ebbflow_task_watermark_seconds for %s %d", op, sub)
	return 0
}

// TestWatermarkIdleInputAndReactivation: a source subtask without data for
// its idle timeout stops holding the watermark back; when data comes again,
// behind, the watermark does not go back, and the subtask counts again once
// it caught up.
func TestWatermarkIdleInputAndReactivation(t *testing.T) {
	// The idle timeout is long next to the heartbeats (every 2 ms): a
	// subtask with a heartbeat must not go idle because a loaded machine did
	// not schedule it for a while (it would come back behind and rightly not
	// count, and the minimum at the end would not be reached).
	f, p := newFeed(2, time.Second), &probe{}
	p.shared = p
	f.beat[0].Store(true) // subtask 0 stays active
	j, _, stop := feedJob(t, f, p)
	f.chans[0] <- at(1000)
	f.chans[1] <- at(100)
	awaitTasks(t, j, "feed", 1, "idle", func(ts runtime.TaskStatus) bool { return ts.WatermarkIdle })
	awaitTasks(t, j, "spread", -1, "at 999 past the idle subtask", wmIs(999))
	if st := j.Status(); st.Tasks[0].WatermarkIdle {
		t.Fatal("subtask 0 idle, but it has data")
	}

	// Data again, behind the watermark (late): active again, no regression.
	f.beat[1].Store(true)
	f.chans[1] <- late(200)
	awaitTasks(t, j, "feed", 1, "active at 199", func(ts runtime.TaskStatus) bool {
		return !ts.WatermarkIdle && watermark.FromTime(ts.Watermark) == 199
	})
	assertWatermark(t, j, "spread", 999)
	// Behind, subtask 1 does not count: subtask 0 alone moves it.
	f.chans[0] <- at(3000)
	awaitTasks(t, j, "spread", -1, "at 2999 (subtask 1 still behind)", wmIs(2999))
	// Caught up, it holds the watermark back again, once every spread
	// subtask has its watermark: a heartbeat of it (2 ms apart, after the
	// 1 ms watermark polls) that reached each is behind it on the channel.
	// Were subtask 0's 4999 there first, subtask 1's 3999 would come
	// behind it and rightly not count.
	p.beatsFrom.Store(4000)
	f.chans[1] <- at(4000)
	awaitTasks(t, j, "feed", 1, "at 3999", wmIs(3999))
	for deadline := time.Now().Add(20 * time.Second); p.beatsSeen(3) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("subtask 1's heartbeats at 4000 reached the spread subtasks %d times at least, want 2", p.beatsSeen(3))
		}
	}
	f.chans[0] <- at(5000)
	awaitTasks(t, j, "feed", 0, "at 4999", wmIs(4999))
	awaitTasks(t, j, "spread", -1, "at 3999 (the minimum again)", wmIs(3999))
	stop()
	p.verdict(t)
}

// wmLog records, per checkpoint, the watermark each recorder subtask had at
// its snapshot, and the watermark restored subtasks opened with.
type wmLog struct {
	mu       sync.Mutex
	at       map[barrier.CheckpointID][]int64
	restored []barrier.CheckpointID
	opened   []int64
}

type wmRecorder struct {
	log *wmLog
	ctx *runtime.Context
}

func (r *wmRecorder) Open(ctx *runtime.Context) error {
	r.ctx = ctx
	for name := range ctx.State.Unions {
		if strings.HasPrefix(name, "ebbflow.") {
			return fmt.Errorf("the operator sees the runtime's state %q", name)
		}
	}
	if ctx.RestoredOK {
		r.log.mu.Lock()
		r.log.restored = append(r.log.restored, ctx.Restored)
		r.log.opened = append(r.log.opened, ctx.Watermark())
		r.log.mu.Unlock()
	}
	return nil
}
func (r *wmRecorder) ProcessBatch(in []operators.Event, out *runtime.Collector[operators.Event]) error {
	for _, e := range in {
		out.Emit(e)
	}
	return nil
}
func (r *wmRecorder) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	r.log.mu.Lock()
	r.log.at[id] = append(r.log.at[id], r.ctx.Watermark())
	r.log.mu.Unlock()
	return state.OperatorState{}, nil
}
func (r *wmRecorder) NotifyComplete(barrier.CheckpointID) error { return nil }
func (r *wmRecorder) Close() error                              { return nil }

// TestWatermarkSurvivesRestore: a restored operator opens at the watermark
// of its checkpoint (the least over its old subtasks when the parallelism
// changed), not back at the start of event time.
func TestWatermarkSurvivesRestore(t *testing.T) {
	const count = 40_000
	dir := t.TempDir()
	log := &wmLog{at: map[barrier.CheckpointID][]int64{}}
	for run, par := range []int{2, 3} {
		var j *runtime.Job
		var once sync.Once
		completed := 0
		opts := runtime.Options{Name: "wm-restore", DataDir: dir, BatchSize: 128, WatermarkInterval: time.Millisecond,
			Checkpoint: runtime.CheckpointOptions{Interval: 5 * time.Millisecond}}
		if run == 0 {
			opts.Listener = func(ev runtime.Event) {
				if ev.Kind == runtime.EventCheckpointCompleted {
					if completed++; completed == 10 {
						once.Do(func() { go j.Stop() })
					}
				}
			}
		}
		j = runtime.NewJob(opts)
		seq := operators.NewSequence(operators.SequenceConfig{Count: count, EventTime: seqTime, MaxOutOfOrderness: 20 * time.Millisecond})
		src := runtime.FromSource(j, "sequence", chaos.PerCheckpoint(seq, 300), runtime.WithParallelism(par))
		spread := runtime.Rebalance(src, "spread", runtime.WithParallelism(par+1))
		rec := runtime.Apply(spread, "recorder", func() runtime.Operator[operators.Event, operators.Event] { return &wmRecorder{log: log} },
			runtime.WithParallelism(par+1))
		runtime.SinkTo(rec, "discard", operators.NewDiscard[operators.Event](nil), runtime.WithParallelism(par+1))
		if err := j.Run(t.Context()); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.restored) != 4 {
		t.Fatalf("%d recorder subtasks restored, want 4", len(log.restored))
	}
	id := log.restored[0]
	floor := watermark.Max
	for _, w := range log.at[id] {
		floor = min(floor, w)
	}
	if floor == watermark.Min {
		t.Fatalf("the recorders had no watermark at checkpoint %d: the test proves nothing", id)
	}
	for i, w := range log.opened {
		if w != floor {
			t.Fatalf("restored subtask %d opened at watermark %s, want %s (the least at checkpoint %d)", i, watermark.Format(w), watermark.Format(floor), id)
		}
	}
}

// cutCounter counts the records it saw up to each barrier, over its
// subtasks, and, as a sink, checks that none arrives at or behind its
// watermark.
type cutCounter struct {
	mu   *sync.Mutex
	cuts map[barrier.CheckpointID]int
	late *atomic.Int64
	ctx  *runtime.Context
	seen int
}

func (c *cutCounter) Open(ctx *runtime.Context) error { c.ctx = ctx; return nil }
func (c *cutCounter) ProcessBatch(in []operators.Event, out *runtime.Collector[operators.Event]) error {
	c.seen += len(in)
	for _, e := range in {
		out.Emit(e)
	}
	return nil
}
func (c *cutCounter) Write(in []operators.Event) error {
	c.seen += len(in)
	for _, e := range in {
		if e.Time <= c.ctx.Watermark() {
			c.late.Add(1)
		}
	}
	return nil
}
func (c *cutCounter) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	c.mu.Lock()
	c.cuts[id] += c.seen
	c.mu.Unlock()
	return state.OperatorState{}, nil
}
func (c *cutCounter) NotifyComplete(barrier.CheckpointID) error { return nil }
func (c *cutCounter) Close() error                              { return nil }

// TestWatermarksKeepBarrierOrder: with a watermark every millisecond
// between frequent barriers, across a rebalance from two source subtasks
// to three, every barrier still cuts the stream at the same records on
// both sides (a record before a barrier is never after it), and no
// watermark overtakes a record it covers. The sequence is endless and the
// job stopped after 20 checkpoints, however slow the machine (CI under
// -race once completed 7 in the second a bounded sequence lasted).
func TestWatermarksKeepBarrierOrder(t *testing.T) {
	const checkpoints = 20
	var mu sync.Mutex
	var late atomic.Int64
	before, after := map[barrier.CheckpointID]int{}, map[barrier.CheckpointID]int{}
	j := runtime.NewJob(runtime.Options{Name: "cuts", BatchSize: 64, WatermarkInterval: time.Millisecond,
		Checkpoint: runtime.CheckpointOptions{Interval: 2 * time.Millisecond}})
	seq := operators.NewSequence(operators.SequenceConfig{EventTime: seqTime, MaxOutOfOrderness: 20 * time.Millisecond, Rate: 100_000})
	src := runtime.FromSource(j, "sequence", seq, runtime.WithParallelism(2))
	counted := runtime.Apply(src, "count", func() runtime.Operator[operators.Event, operators.Event] {
		return &cutCounter{mu: &mu, cuts: before}
	}, runtime.WithParallelism(2))
	spread := runtime.Rebalance(counted, "spread", runtime.WithParallelism(3))
	runtime.SinkTo(spread, "sink", func() runtime.Sink[operators.Event] {
		return &cutCounter{mu: &mu, cuts: after, late: &late}
	}, runtime.WithParallelism(3))
	done := make(chan error, 1)
	go func() { done <- j.Run(t.Context()) }()
	for j.Status().Completed < checkpoints {
		select {
		case err := <-done:
			t.Fatalf("the job ended after %d checkpoints: %v", j.Status().Completed, err)
		case <-time.After(time.Millisecond):
		}
	}
	j.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(before) < checkpoints {
		t.Fatalf("only %d checkpoints cut the sources: the test proves little", len(before))
	}
	for id, n := range before {
		if after[id] != n {
			t.Fatalf("checkpoint %d: %d records before it at the sources, %d at the sinks", id, n, after[id])
		}
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d records arrived behind the watermark", n)
	}
}
