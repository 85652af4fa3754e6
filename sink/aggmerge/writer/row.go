package writer

import (
	"errors"
	"fmt"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/state"
)

// Row is one write to the table: the primary key and one value per target
// column, in the order of Config.Columns.
type Row struct {
	Kind runtime.RowKind // RowInsert and RowUpdateAfter aggregate, RowUpdateBefore and RowDelete retract
	Key  []agg.Value
	Vals []agg.Value
	// At is the record's event time (Unix nanoseconds, see package
	// watermark), read when Config.Window is set and not Assigned: the
	// writer appends each window's start and end to Key.
	At int64
	// Clear, when set, removes the written columns of Key's row instead of
	// writing Vals (not read): the row is deleted when no other column is
	// left, a -D in the log. It keeps its order with the key's writes. A
	// session window clears the rows of the sessions it merged. Needs
	// Config.Clears.
	Clear bool
}

// Mapper fills row from a record. It should append to row.Key[:0] and
// row.Vals[:0] so the sink reuses their memory: no allocation per record.
// It is called exactly once per record.
type Mapper[T any] func(v T, row *Row) error

func errValues(got, want int) error {
	return fmt.Errorf("aggmerge writer: %d values for %d target columns", got, want)
}

// record is one input record mapped (one per window, when windowed): the
// bucket that routes it to its writer is the bucket of the key it is
// written under, both taken from one call of the mapper. key (encoded by
// the table's AppendKey) and vals point into the mapping subtask's arenas;
// end is the window's end (Unix nanoseconds) when windowed; clear is
// Row.Clear.
type record struct {
	bucket int32
	kind   runtime.RowKind
	clear  bool
	key    []byte
	vals   []agg.Value
	end    int64
}

// Arena chunk sizes: one allocation per chunk, shared by the records of
// about one runtime batch.
const (
	keyChunk = 64 << 10
	valChunk = 1 << 10
)

// arena hands out copies in chunks that are never reused: a chunk is
// garbage once no record points into it, so a record may cross the shuffle
// and wait in the writer's input without being copied again, at one
// allocation per chunk, not per record.
type arena[E any] struct {
	chunk []E
	size  int
}

func (a *arena[E]) copy(src []E) []E {
	if len(src) > cap(a.chunk)-len(a.chunk) {
		a.chunk = make([]E, 0, max(a.size, len(src)))
	}
	start := len(a.chunk)
	a.chunk = append(a.chunk, src...)
	return a.chunk[start:len(a.chunk):len(a.chunk)]
}

// mapOp is one subtask of "<name>-map": it calls the mapper once per record
// and emits the mapped record.
type mapOp[T any] struct {
	cfg    Config
	mapper Mapper[T]
	t      *aggmerge.Table
	row    Row
	keyBuf []byte
	starts []int64 // a record's window starts, when windowed
	keys   arena[byte]
	vals   arena[agg.Value]
}

func newMapOp[T any](cfg Config, mapper Mapper[T]) *mapOp[T] {
	return &mapOp[T]{cfg: cfg, mapper: mapper, t: cfg.Table,
		keys: arena[byte]{size: keyChunk}, vals: arena[agg.Value]{size: valChunk}}
}

func (m *mapOp[T]) Open(*runtime.Context) error { return nil }

func (m *mapOp[T]) ProcessBatch(in []T, out *runtime.Collector[record]) error {
	buckets := m.t.Schema().Buckets
	for _, v := range in {
		if err := m.mapper(v, &m.row); err != nil {
			return err
		}
		if m.row.Kind.Retracts() && !m.cfg.Retracts {
			return fmt.Errorf("aggmerge writer: a retracting row (%s) reached a sink not declared Retracts", m.row.Kind)
		}
		if m.row.Clear && !m.cfg.Clears {
			return errors.New("aggmerge writer: a clearing row reached a sink not declared Clears")
		}
		w := m.cfg.Window
		if w == nil || w.Assigned {
			if err := m.emit(out, buckets, m.assignedEnd(), m.vals.copy(m.row.Vals)); err != nil {
				return err
			}
			continue
		}
		n := len(m.row.Key)
		vals := m.vals.copy(m.row.Vals) // shared by the record's windows
		m.starts = w.windows().Starts(m.starts[:0], m.row.At)
		for _, start := range m.starts {
			end := start + int64(w.Size)
			m.row.Key = append(m.row.Key[:n], agg.MicrosValue(start/int64(time.Microsecond)), agg.MicrosValue(end/int64(time.Microsecond)))
			if err := m.emit(out, buckets, end, vals); err != nil {
				return err
			}
		}
	}
	return nil
}

// assignedEnd is the window end (Unix nanoseconds) the mapper's key ends
// with, for a Window.Assigned; 0 without a window.
func (m *mapOp[T]) assignedEnd() int64 {
	if m.cfg.Window == nil || len(m.row.Key) == 0 {
		return 0
	}
	return m.row.Key[len(m.row.Key)-1].Micros() * int64(time.Microsecond)
}

// emit sends the mapped row on, under its key with vals, as the record of
// the window ending at end (0: not windowed).
func (m *mapOp[T]) emit(out *runtime.Collector[record], buckets int, end int64, vals []agg.Value) error {
	var err error
	if m.keyBuf, err = m.t.AppendKey(m.keyBuf[:0], m.row.Key); err != nil {
		return err
	}
	out.Emit(record{
		bucket: int32(aggmerge.BucketOf(m.keyBuf, buckets)),
		kind:   m.row.Kind,
		clear:  m.row.Clear,
		key:    m.keys.copy(m.keyBuf),
		vals:   vals,
		end:    end,
	})
	return nil
}

func (m *mapOp[T]) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (m *mapOp[T]) NotifyComplete(barrier.CheckpointID) error { return nil }
func (m *mapOp[T]) Close() error                              { return nil }
