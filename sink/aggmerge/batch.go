package aggmerge

import (
	"fmt"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// Mode says how a write combines with the stored row.
type Mode uint8

// The merge modes.
const (
	// Aggregate merges each target column with its function (the default).
	Aggregate Mode = iota
	// Overwrite sets the target columns to the given values, bypassing the
	// functions and the delete behaviour (used by undo). A row left with
	// every value column null is deleted.
	Overwrite
	// Retract applies each target column's inverse; a batch naming a column
	// whose function cannot retract refuses it. A row left with every value
	// column null is deleted.
	Retract
	// Partial aggregates pre-aggregated values (agg.Func.Partial and
	// Combine): one write stands for several inputs of its key, which a
	// writer combined in memory. Otherwise like Aggregate.
	Partial
)

func (m Mode) String() string {
	switch m {
	case Aggregate:
		return "aggregate"
	case Overwrite:
		return "overwrite"
	case Retract:
		return "retract"
	case Partial:
		return "partial"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Writer identifies who writes a batch; it is recorded in every log entry.
// A restarted writer has a higher epoch.
type Writer struct {
	ID    string
	Epoch uint64
}

// Marker is a commit or rollback marker appended to a bucket's log.
type Marker = encoding.Marker

// Marker kinds.
const (
	MarkerCommit   = encoding.MarkerCommit
	MarkerRollback = encoding.MarkerRollback
)

// Batch is a set of writes applied atomically by Table.Apply. It names its
// target columns once: every write sets exactly those, and changes nothing
// else. A batch is not safe for concurrent use; Reset reuses its memory.
type Batch struct {
	t         *Table
	writer    Writer
	undo      bool
	cols      []int // target value columns, in the order values are given
	allCols   bool
	noRetract error // why Retract is refused, or nil
	writes    []write
	vals      []agg.Value // len(cols) values per write that carries values
	keys      []byte      // encoded primary keys, back to back
	keyBuf    []byte      // scratch for encoding one key
	marks     []mark
}

type write struct {
	del      bool
	mode     Mode
	bucket   uint32
	keyStart int
	keyEnd   int
	val      int // index of the first value in vals, or -1
}

type mark struct {
	bucket uint32
	m      Marker
}

// NewBatch starts a batch by w that writes the named value columns (all
// value columns when columns is empty).
func (t *Table) NewBatch(w Writer, columns []string) (*Batch, error) {
	b := &Batch{t: t, writer: w}
	if len(columns) == 0 {
		b.allCols = true
		for i := range t.schema.Values {
			b.cols = append(b.cols, i)
		}
	}
	seen := make(map[int]bool, len(columns))
	for _, name := range columns {
		i := t.schema.ValueIndex(name)
		if i < 0 {
			return nil, fmt.Errorf("%w: no value column %q", ErrInvalid, name)
		}
		if seen[i] {
			return nil, fmt.Errorf("%w: column %q named twice", ErrInvalid, name)
		}
		seen[i] = true
		b.cols = append(b.cols, i)
	}
	b.allCols = len(b.cols) == len(t.schema.Values)
	for _, i := range b.cols {
		if f := t.funcs[i]; !f.CanRetract() {
			b.noRetract = fmt.Errorf("%w: column %q: %w: function %s", ErrInvalid, t.schema.Values[i].Name, agg.ErrCannotRetract, f.Name())
			break
		}
	}
	return b, nil
}

// SetUndo marks every log entry of the batch as written by an undo.
func (b *Batch) SetUndo(undo bool) { b.undo = undo }

// Len returns the number of writes and markers in the batch.
func (b *Batch) Len() int { return len(b.writes) + len(b.marks) }

// Reset empties the batch, keeping its writer, columns and memory.
func (b *Batch) Reset() {
	b.writes, b.vals, b.keys, b.marks = b.writes[:0], b.vals[:0], b.keys[:0], b.marks[:0]
}

// Upsert adds a write of vals (one per target column, nulls allowed) to the
// row of key, in the given mode.
func (b *Batch) Upsert(mode Mode, key, vals []agg.Value) error {
	return b.add(false, mode, key, vals)
}

// Delete adds a delete of the row of key. In Aggregate mode the table's
// delete behaviour decides; in Overwrite mode the target columns are
// cleared (the whole row when they are all the value columns); vals must be
// nil in both. In Retract mode a delete is the retraction of vals, exactly
// like Upsert in Retract mode.
func (b *Batch) Delete(mode Mode, key, vals []agg.Value) error {
	if mode != Retract && vals != nil {
		return fmt.Errorf("%w: a %s delete takes no values", ErrInvalid, mode)
	}
	return b.add(true, mode, key, vals)
}

// Mark appends a marker to a bucket's log, after the batch's writes.
func (b *Batch) Mark(bucket int, m Marker) error {
	if bucket < 0 || bucket >= b.t.schema.Buckets {
		return fmt.Errorf("%w: bucket %d not in [0, %d)", ErrInvalid, bucket, b.t.schema.Buckets)
	}
	if m.Kind != MarkerCommit && m.Kind != MarkerRollback {
		return fmt.Errorf("%w: marker kind %d", ErrInvalid, m.Kind)
	}
	b.marks = append(b.marks, mark{bucket: uint32(bucket), m: m})
	return nil
}

// UpsertEncoded is Upsert with the key already encoded by this table's
// AppendKey, for callers that keep encoded keys (a combining writer) and
// would otherwise encode each key twice. The encoding is not checked.
func (b *Batch) UpsertEncoded(mode Mode, key []byte, vals []agg.Value) error {
	return b.addEncoded(false, mode, key, vals)
}

// DeleteEncoded is Delete, without values, with the key already encoded by
// this table's AppendKey (not checked).
func (b *Batch) DeleteEncoded(mode Mode, key []byte) error {
	if mode == Retract {
		return fmt.Errorf("%w: a retracting delete takes values", ErrInvalid)
	}
	return b.addEncoded(true, mode, key, nil)
}

func (b *Batch) add(del bool, mode Mode, key, vals []agg.Value) error {
	var err error
	if b.keyBuf, err = b.t.appendKey(b.keyBuf[:0], key, len(b.t.keyTypes)); err != nil {
		return err
	}
	return b.addEncoded(del, mode, b.keyBuf, vals)
}

func (b *Batch) addEncoded(del bool, mode Mode, key []byte, vals []agg.Value) error {
	switch mode {
	case Aggregate, Overwrite:
	case Partial:
		if del {
			return fmt.Errorf("%w: a delete cannot be partial", ErrInvalid)
		}
	case Retract:
		if b.noRetract != nil {
			return b.noRetract
		}
	default:
		return fmt.Errorf("%w: %s", ErrInvalid, mode)
	}
	w := write{del: del, mode: mode, keyStart: len(b.keys), val: -1}
	keys := append(b.keys, key...)
	w.keyEnd = len(keys)
	w.bucket = uint32(BucketOf(keys[w.keyStart:], b.t.schema.Buckets))
	if !del || mode == Retract {
		if len(vals) != len(b.cols) {
			return fmt.Errorf("%w: %d values for %d target columns", ErrInvalid, len(vals), len(b.cols))
		}
		w.val = len(b.vals)
		for i, v := range vals {
			c, err := agg.Conform(b.t.valTypes[b.cols[i]], v)
			if err != nil {
				b.vals = b.vals[:w.val]
				return fmt.Errorf("%w: column %q: %w", ErrInvalid, b.t.schema.Values[b.cols[i]].Name, err)
			}
			b.vals = append(b.vals, c)
		}
	}
	b.keys = keys
	b.writes = append(b.writes, w)
	return nil
}
