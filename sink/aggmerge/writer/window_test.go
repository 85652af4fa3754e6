package writer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
	"github.com/ebbflow/ebbflow/state"
)

// wev is an event of the window tests: key k at event time at adds v (del:
// retracts it).
type wev struct {
	k, at, v int64
	del      bool
}

// script feeds a scriptSource: the records it has to emit and the watermark
// it reports, set by the test while the job runs.
type script struct {
	mu   sync.Mutex
	recs []wev
	wm   int64
	read chan struct{} // closed at the first Read: the restore's undo is done
	once sync.Once
}

func newScript(recs []wev, wm int64) *script {
	return &script{recs: recs, wm: wm, read: make(chan struct{})}
}

func (s *script) setWatermark(wm int64) { s.mu.Lock(); s.wm = wm; s.mu.Unlock() }
func (s *script) push(r ...wev)         { s.mu.Lock(); s.recs = append(s.recs, r...); s.mu.Unlock() }

type scriptSource struct{ s *script }

func (src scriptSource) Open(*runtime.Context) error { return nil }
func (src scriptSource) Read(buf []wev) ([]wev, error) {
	s := src.s
	s.once.Do(func() { close(s.read) })
	s.mu.Lock()
	n := min(len(s.recs), cap(buf)-len(buf))
	buf = append(buf, s.recs[:n]...)
	s.recs = s.recs[n:]
	s.mu.Unlock()
	if n == 0 {
		time.Sleep(time.Millisecond) // nothing to read: return promptly, without spinning
	}
	return buf, nil
}
func (src scriptSource) Watermark(time.Time) (int64, bool) {
	src.s.mu.Lock()
	defer src.s.mu.Unlock()
	return src.s.wm, false
}
func (src scriptSource) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (src scriptSource) NotifyComplete(barrier.CheckpointID) error { return nil }
func (src scriptSource) Close() error                              { return nil }

func windowSchema() aggmerge.Schema {
	i64, ts := agg.Type{Kind: agg.KindInt64}, agg.Type{Kind: agg.KindTimestamp}
	return aggmerge.Schema{
		Key:     []aggmerge.Column{{Name: "k", Type: i64}, {Name: "window_start", Type: ts}, {Name: "window_end", Type: ts}},
		Values:  []aggmerge.Column{{Name: "total", Type: i64, Func: "sum"}, {Name: "n", Type: i64, Func: "count"}},
		Buckets: 4,
	}
}

func mapWindowed(e wev, r *writer.Row) error {
	r.Kind = runtime.RowInsert
	if e.del {
		r.Kind = runtime.RowDelete
	}
	r.Key = append(r.Key[:0], agg.IntValue(e.k))
	r.At = e.at
	r.Vals = append(r.Vals[:0], agg.IntValue(e.v), agg.IntValue(1))
	return nil
}

// windowRun runs the scripted job "win" on tbl: source → hopping windows of
// 1m every 30s, retained 1m, at parallelism 2, with checkpoints only at the
// start and on stop. during drives it and returns once done with it.
func windowRun(t *testing.T, tbl *aggmerge.Table, dir string, s *script, reg prometheus.Registerer, during func(j *runtime.Job, cancel context.CancelFunc)) error {
	t.Helper()
	j := runtime.NewJob(runtime.Options{Name: "win", DataDir: dir, Parallelism: 1, BatchSize: 64, Registerer: reg,
		WatermarkInterval: time.Millisecond, Restart: runtime.RestartOptions{MaxAttempts: -1}})
	src := runtime.FromSource(j, "script", func() runtime.Source[wev] { return scriptSource{s} })
	retain := time.Minute
	cfg := writer.Config{Table: tbl, Retracts: true, FlushInterval: time.Millisecond, BatchSize: 50,
		Window: &writer.Window{Size: time.Minute, Slide: 30 * time.Second, Retain: &retain}}
	if err := writer.To(src, "table", cfg, mapWindowed, runtime.WithParallelism(2)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { during(j, cancel) })
	err := j.Run(ctx)
	cancel()
	wg.Wait()
	return err
}

type wkey struct{ k, start, end int64 } // start and end in microseconds
type wval struct{ total, n int64 }

// windowModel aggregates events per key and hopping window (1m every 30s)
// by trying every start near each event.
func windowModel(evs []wev) map[wkey]wval {
	out := map[wkey]wval{}
	slide, size := int64(30*time.Second), int64(time.Minute)
	for _, e := range evs {
		for s := e.at - e.at%slide - 4*slide; s <= e.at; s += slide {
			if e.at < s || e.at >= s+size {
				continue
			}
			k := wkey{e.k, s / 1000, (s + size) / 1000}
			v := out[k]
			if e.del {
				v.total, v.n = v.total-e.v, v.n-1
			} else {
				v.total, v.n = v.total+e.v, v.n+1
			}
			out[k] = v
		}
	}
	return out
}

func windowRows(t *testing.T, tbl *aggmerge.Table) map[wkey]wval {
	t.Helper()
	got, err := scanWindows(tbl)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// windowTable is the table's rows, or none when it cannot be read.
func windowTable(tbl *aggmerge.Table) map[wkey]wval {
	got, _ := scanWindows(tbl)
	return got
}

func scanWindows(tbl *aggmerge.Table) (map[wkey]wval, error) {
	got := map[wkey]wval{}
	err := tbl.Scan(func(r aggmerge.Row) error {
		got[wkey{r.Key[0].Int(), r.Key[1].Micros(), r.Key[2].Micros()}] = wval{r.Values[0].Int(), r.Values[1].Int()}
		return nil
	})
	return got, err
}

// live is the model's rows whose window is not past retention (1m) at wm.
func live(model map[wkey]wval, wm int64) map[wkey]wval {
	out := map[wkey]wval{}
	for k, v := range model {
		if k.end*1000+int64(time.Minute) > wm {
			out[k] = v
		}
	}
	return out
}

func sameRows(got, want map[wkey]wval) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d rows, want %d", len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return fmt.Errorf("row %+v: %+v (present %v), want %+v", k, g, ok, v)
		}
	}
	return nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWindowRetentionUndo: hopping windows (1m every 30s) with retractions,
// retained 1m after their end. Run 1 writes the input and stops with a
// checkpoint: the table equals the model. Run 2 restores it, the watermark
// moves on and the expired windows' rows are deleted (-D), then the run
// crashes (no checkpoint). Run 3 restores: undo brings every deleted row
// back with its exact value; the watermark moves on again and deletes them
// again, once; a record for a deleted window is dropped and counted. The
// log holds, per expired row, a delete by run 2, its undo, and one delete
// by run 3.
func TestWindowRetentionUndo(t *testing.T) {
	dir := t.TempDir()
	// Each run opens the table afresh, as a new process would.
	var tbl *aggmerge.Table
	reopen := func() {
		if tbl != nil {
			if err := tbl.Close(); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if tbl, err = aggmerge.Open(dir+"/table", windowSchema(), aggmerge.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	defer func() { tbl.Close() }()
	base := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC).UnixNano()
	var evs []wev
	for i := range int64(400) {
		e := wev{k: i % 20, at: base + i*int64(700*time.Millisecond), v: i}
		evs = append(evs, e)
		if i%7 == 3 { // never every record of a window: a key's records in one are 20 apart
			e.del = true
			evs = append(evs, e)
		}
	}
	model := windowModel(evs)
	early := base - int64(time.Hour) // expires nothing

	s := newScript(evs, early)
	err := windowRun(t, tbl, dir, s, nil, func(j *runtime.Job, _ context.CancelFunc) {
		waitFor(t, "run 1 to write the input", func() error { return sameRows(windowRows(t, tbl), model) })
		j.Stop()
	})
	if err != nil {
		t.Fatalf("run 1: %v", err)
	}

	expire := base + int64(3*time.Minute) // deletes the windows ending at or before base+2m
	want := live(model, expire)
	if len(want) == len(model) || len(want) == 0 {
		t.Fatalf("the expiry deletes %d of %d rows: the test needs some of both", len(model)-len(want), len(model))
	}
	reopen()
	s = newScript(nil, early)
	err = windowRun(t, tbl, dir, s, nil, func(_ *runtime.Job, cancel context.CancelFunc) {
		<-s.read
		s.setWatermark(expire)
		waitFor(t, "run 2 to delete the expired windows", func() error { return sameRows(windowRows(t, tbl), want) })
		cancel() // a crash: no checkpoint covers the deletes
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("run 2: %v", err)
	}

	reopen()
	reg := prometheus.NewRegistry()
	s = newScript(nil, early)
	err = windowRun(t, tbl, dir, s, reg, func(j *runtime.Job, _ context.CancelFunc) {
		<-s.read // undo is done before a source reads
		if err := sameRows(windowRows(t, tbl), model); err != nil {
			t.Errorf("after undo: %v (the deleted rows must be back)", err)
		}
		s.setWatermark(expire)
		waitFor(t, "run 3 to delete the expired windows", func() error { return sameRows(windowRows(t, tbl), want) })
		late := wev{k: 1, at: base + int64(10*time.Second), v: 1000} // its windows are past retention
		s.push(late)
		waitFor(t, "the late record to be dropped", func() error {
			if n := metricSum(t, reg, "ebbflow_sink_window_records_expired_total"); n != 2 {
				return fmt.Errorf("%v records dropped, want 2 (one per window)", n)
			}
			return nil
		})
		j.Stop()
	})
	if err != nil {
		t.Fatalf("run 3: %v", err)
	}
	if err := sameRows(windowRows(t, tbl), want); err != nil {
		t.Fatalf("final table: %v", err)
	}
	if n := metricSum(t, reg, "ebbflow_sink_window_rows_expired_total"); int(n) != len(model)-len(want) {
		t.Errorf("rows expired %v, want %d", n, len(model)-len(want))
	}
	// Per expired row: run 2's delete, its undo, run 3's delete.
	type hist struct{ deletes, undone int }
	ops := map[wkey]*hist{}
	for b := range 4 {
		if err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
			if e.Op != aggmerge.Delete && !(e.Undo && e.Op == aggmerge.Insert) {
				return nil
			}
			k := wkey{e.Key[0].Int(), e.Key[1].Micros(), e.Key[2].Micros()}
			if ops[k] == nil {
				ops[k] = &hist{}
			}
			if e.Undo {
				ops[k].undone++
			} else {
				ops[k].deletes++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for k := range model {
		_, kept := want[k]
		h := ops[k]
		switch {
		case kept && h != nil:
			t.Errorf("row %+v of a live window: %d deletes, %d undone, want none", k, h.deletes, h.undone)
		case !kept && (h == nil || h.deletes != 2 || h.undone != 1):
			t.Errorf("expired row %+v: log %+v, want 2 deletes (runs 2 and 3) and 1 undone", k, h)
		}
	}
}

// metricSum sums a counter over the subtasks' metrics.
func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
