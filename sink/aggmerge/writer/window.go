package writer

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Window makes a table aggregate per window of event time: the mapper gives
// each record's event time (Row.At), and the writer writes the record into
// every window holding it, appending the window's start and end to the
// record's key (the table's last two key columns, timestamps). A tumbling
// window (Slide 0 or Size) gives one write per record, a hopping one
// Size/Slide writes; each is an ordinary write of its key, so every
// function, combining, retraction and undo work per window.
//
// With Assigned, a window operator upstream assigned the windows: the
// mapper's key ends with the window's start and end already, one write per
// window, and the writer only applies Retain (Size and Slide unused).
type Window struct {
	Size, Slide time.Duration
	Assigned    bool
	// Retain, when set, deletes a window's rows from the table once the
	// watermark the sink receives passes the window's end plus *Retain
	// (the sink's columns cleared, the row deleted when no other column is
	// left: a -D in the changelog). A record for a window already deleted is
	// dropped. The end of event time (an input that ended) deletes nothing.
	Retain *time.Duration
}

func (w *Window) windows() watermark.Windows { return watermark.Windows{Size: w.Size, Slide: w.Slide} }

// check validates the window against the table: two timestamp key columns
// last, sizes in whole microseconds (the timestamps' precision).
func (w *Window) check(t *aggmerge.Table) error {
	if !w.Assigned {
		if err := w.windows().Check(); err != nil {
			return fmt.Errorf("aggmerge writer: table %s: %w", t.Dir(), err)
		}
		if w.Size%time.Microsecond != 0 || w.Slide%time.Microsecond != 0 {
			return fmt.Errorf("aggmerge writer: table %s: window size %s and slide %s must be whole microseconds", t.Dir(), w.Size, w.Slide)
		}
	}
	if w.Retain != nil && *w.Retain < 0 {
		return fmt.Errorf("aggmerge writer: table %s: window retention %s is negative", t.Dir(), *w.Retain)
	}
	key := t.Schema().Key
	if len(key) < 2 || key[len(key)-2].Type.Kind != agg.KindTimestamp || key[len(key)-1].Type.Kind != agg.KindTimestamp {
		return fmt.Errorf("aggmerge writer: table %s: a windowed table's last two key columns are the window's start and end, timestamps", t.Dir())
	}
	return nil
}

// expired reports whether a window ending at end is past retention at
// watermark wm: end + retain <= wm, without overflow.
func expired(end int64, retain time.Duration, wm int64) bool {
	below := wm - int64(retain)
	if wm == watermark.Min || below > wm { // no watermark yet, or wm - retain is before Min
		return false
	}
	return end <= below
}

// windowIndex is a sink subtask's index of the rows it may have to delete:
// per window end, the encoded keys of its owned buckets written with that
// end, and the ends in a min-heap. It is rebuilt from the table on open
// (after undo), so it always describes the table as of the last write.
type windowIndex struct {
	keys map[int64]map[string]struct{}
	ends endHeap
}

func newWindowIndex() *windowIndex { return &windowIndex{keys: map[int64]map[string]struct{}{}} }

func (x *windowIndex) add(end int64, key []byte) {
	set, ok := x.keys[end]
	if !ok {
		set = map[string]struct{}{}
		x.keys[end] = set
		heap.Push(&x.ends, end)
	}
	if _, ok := set[string(key)]; !ok {
		set[string(key)] = struct{}{}
	}
}

// takeExpired removes and returns, earliest end first, the keys of every
// window past retention at wm.
func (x *windowIndex) takeExpired(retain time.Duration, wm int64, fn func(key string) error) error {
	for len(x.ends) > 0 && expired(x.ends[0], retain, wm) {
		end := heap.Pop(&x.ends).(int64)
		for key := range x.keys[end] {
			if err := fn(key); err != nil {
				return err
			}
		}
		delete(x.keys, end)
	}
	return nil
}

type endHeap []int64

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// retention is what a sink subtask with a windowed table's Retain does.
type retention struct {
	retain  time.Duration
	index   *windowIndex
	rows    prometheus.Counter // rows deleted
	dropped prometheus.Counter // records of deleted windows
}

// openRetention builds the index of the owned buckets from the table and
// registers the metrics.
func (s *sink) openRetention(reg prometheus.Registerer) error {
	w := s.cfg.Window
	if w == nil || w.Retain == nil {
		return nil
	}
	r := &retention{retain: *w.Retain, index: newWindowIndex(),
		rows: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_sink_window_rows_expired_total",
			Help: "Rows of windows past retention that the sink deleted from its table."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_sink_window_records_expired_total",
			Help: "Writes dropped because their window was past retention (already deleted): one per record and window."})}
	if reg != nil {
		for _, c := range []prometheus.Collector{r.rows, r.dropped} {
			if err := reg.Register(c); err != nil {
				return fmt.Errorf("register retention metrics: %w", err)
			}
		}
	}
	last := len(s.table.Schema().Key) - 1
	for _, b := range s.owned {
		err := s.table.ScanBucket(b, func(key []byte, row aggmerge.Row) error {
			r.index.add(row.Key[last].Micros()*int64(time.Microsecond), key)
			return nil
		})
		if err != nil {
			return fmt.Errorf("index the windows of table %s bucket %d: %w", s.table.Dir(), b, err)
		}
	}
	s.ret = r
	return nil
}

// keep reports whether a record goes on to the table: not when its window
// is past retention. It indexes the ones that go on, but for a clear, which
// leaves no row to delete.
func (r *retention) keep(rec *record, wm int64) bool {
	if expired(rec.end, r.retain, wm) {
		r.dropped.Inc()
		return false
	}
	if !rec.clear {
		r.index.add(rec.end, rec.key)
	}
	return true
}

// OnWatermark deletes the rows of the windows past retention at w, after
// every write before w (the combined ones first).
func (s *sink) OnWatermark(w int64) error {
	if s.ret == nil || w == watermark.Max {
		return nil
	}
	n := 0
	err := s.ret.index.takeExpired(s.ret.retain, w, func(key string) error {
		if n == 0 && s.comb != nil && s.comb.len() > 0 {
			if err := s.comb.drain(s.batch); err != nil {
				return err
			}
		}
		n++
		if err := s.batch.DeleteEncoded(aggmerge.Overwrite, []byte(key)); err != nil {
			return err
		}
		if s.batch.Len() >= s.cfg.BatchSize {
			return s.flush()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("expire windows of table %s: %w", s.table.Dir(), err)
	}
	if n == 0 {
		return nil
	}
	s.ret.rows.Add(float64(n))
	return s.flush()
}
