package aggmerge

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// LoadRow is a row for Load: its key as AppendKey encodes it (the encoding
// is not checked, its bucket is) and one value per value column.
type LoadRow struct {
	Key  string
	Vals []agg.Value
}

// loadChunk bounds the rows of one log chunk, and of one pebble batch, of
// a Load.
const loadChunk = 1 << 15

// Load writes rows, of distinct keys, into bucket, which must hold no row
// (ErrNotEmpty): the bulk load of a bucket rebuilt from elsewhere (a
// handover rebuilds its bucket from the owner log). It returns the rows
// written. Rows and log are what Apply makes of Overwrite upserts of every
// value column into absent rows (an Insert entry per row by w; a row of
// nulls only is no row), in key order, in chunks of loadChunk rows, each
// chunk one pebble batch of its log entries, its rows and the bucket's
// state. A crash leaves the chunks written so far.
//
// It skips the work an empty bucket makes pointless: Apply looks each old
// row up in the row cache and leaves each new row dirty there for the
// storer, about half of a handover's CPU. Load writes the rows to the
// stored rows with their log chunk, sorted by key so that pebble inserts
// each into its memtable next to the previous one (see writeRows), and
// makes no cache entries: the bucket is then loaded (rowCache), a miss there
// reading pebble. The sort also finds a key given twice.
func (t *Table) Load(w Writer, bucket int, rows []LoadRow) (int, error) {
	n, err := t.bulkLoad(w, bucket, rows)
	if err != nil {
		return 0, fmt.Errorf("load bucket %d of %q: %w", bucket, t.dir, err)
	}
	return n, nil
}

func (t *Table) bulkLoad(w Writer, bucket int, rows []LoadRow) (int, error) {
	if err := t.checkBucket(bucket); err != nil {
		return 0, err
	}
	t.mu.RLock()
	s := t.mu.buckets[bucket]
	t.mu.RUnlock()
	if s.Rows != 0 {
		return 0, fmt.Errorf("%w: %d rows", ErrNotEmpty, s.Rows)
	}
	order := make([]rowOrder, len(rows))
	for i, r := range rows {
		if b := BucketOf([]byte(r.Key), t.schema.Buckets); b != bucket {
			return 0, fmt.Errorf("%w: a key of bucket %d", ErrInvalid, b)
		}
		if len(r.Vals) != len(t.valTypes) {
			return 0, fmt.Errorf("%w: %d values for %d value columns", ErrInvalid, len(r.Vals), len(t.valTypes))
		}
		order[i] = newRowOrder(uint32(bucket), r.Key, i)
	}
	sortRowOrder(order, func(i uint32) string { return rows[i].Key })
	l := &loader{t: t, w: w, bucket: uint32(bucket), end: s.LogEnd}
	for i := range t.valTypes {
		l.cols = append(l.cols, i)
	}
	written := 0
	for k, o := range order {
		r := &rows[o.i]
		if k > 0 && rows[order[k-1].i].Key == r.Key {
			return written, fmt.Errorf("%w: a key given twice", ErrInvalid)
		}
		if err := l.add(r); err != nil {
			return written, err
		}
		if l.n >= loadChunk {
			if err := l.flush(); err != nil {
				return written, err
			}
			written += loadChunk
		}
	}
	n := l.n
	if err := l.flush(); err != nil {
		return written, err
	}
	return written + n, nil
}

// loader builds and writes the chunks of one Load.
type loader struct {
	t      *Table
	w      Writer
	cols   []int // every value column, for checkWriter
	bucket uint32
	end    uint64 // the bucket's log end as the previous flush left it
	vals   []agg.Value
	row    []byte
	// The pending chunk: its records, their keys and rows back to back
	// (ends marking where each ends), and a pebble batch holding the rows.
	n    int
	recs []byte
	keys []byte
	rows []byte
	ends []loadedEnd
	pb   *pebble.Batch
}

type loadedEnd struct{ key, row int }

// add adds a row to the pending chunk.
func (l *loader) add(r *LoadRow) error {
	t := l.t
	l.vals = l.vals[:0]
	for i, v := range r.Vals {
		c, err := agg.Conform(t.valTypes[i], v)
		if err != nil {
			return fmt.Errorf("%w: column %q: %w", ErrInvalid, t.schema.Values[i].Name, err)
		}
		l.vals = append(l.vals, c)
	}
	if allNull(l.vals) {
		return nil // as Overwrite: a row of nulls only is no row
	}
	l.row = encoding.AppendRow(l.row[:0], t.valTypes, l.vals)
	l.recs = encoding.AppendRecord(l.recs, encoding.Record{Op: encoding.OpInsert, Key: []byte(r.Key), After: l.row})
	l.keys = append(l.keys, r.Key...)
	l.rows = append(l.rows, l.row...)
	l.ends = append(l.ends, loadedEnd{key: len(l.keys), row: len(l.rows)})
	if l.pb == nil {
		l.pb = t.db.NewBatch()
	}
	prefix := len(encoding.RowPrefix(nil, 0))
	op := l.pb.SetDeferred(prefix+len(r.Key), len(l.row))
	encoding.RowPrefix(op.Key[:0], l.bucket)
	copy(op.Key[prefix:], r.Key)
	copy(op.Value, l.row)
	if err := op.Finish(); err != nil {
		return err
	}
	l.n++
	return nil
}

// flush writes the pending chunk: its log entries, rows and the bucket's
// state in one pebble batch, synced with Options.SyncWrites. On error
// nothing of it is written.
func (l *loader) flush() error {
	if l.n == 0 {
		return nil
	}
	t := l.t
	defer func() {
		_ = l.pb.Close()
		l.pb = nil
	}()
	// store.mu: no store is under way, so no entry is pinned with an older
	// row that the store would write over a loaded one.
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkWritable(); err != nil {
		return err
	}
	wrote, err := t.checkWriter(l.w, l.cols)
	if err != nil {
		return err
	}
	t.mu.RLock()
	s := t.mu.buckets[l.bucket]
	t.mu.RUnlock()
	if s.LogEnd != l.end {
		return fmt.Errorf("%w: its log moved from %d to %d during the load", ErrNotEmpty, l.end, s.LogEnd)
	}
	chunk := encoding.AppendChunkHeader(nil, encoding.ChunkHeader{Writer: l.w.ID, Epoch: l.w.Epoch}, l.n)
	key := encoding.LogKey(l.bucket, s.LogEnd)
	op := l.pb.SetDeferred(len(key), len(chunk)+len(l.recs))
	copy(op.Key, key)
	copy(op.Value[copy(op.Value, chunk):], l.recs)
	if err := op.Finish(); err != nil {
		return err
	}
	s.LogEnd += uint64(l.n)
	s.Rows += uint64(l.n)
	if err := l.pb.Set(encoding.BucketKey(l.bucket), encoding.AppendBucketState(nil, s), nil); err != nil {
		return err
	}
	// Loaded, and in the key filter, before the commit: a miss must not
	// answer "absent" once the rows are there.
	t.mu.Lock()
	t.mu.cache.loaded[l.bucket] = true
	if keys := t.mu.cache.keys; keys != nil {
		var from int
		for _, to := range l.ends {
			keys.add(l.keys[from:to.key])
			from = to.key
		}
	}
	t.mu.Unlock()
	if err := t.commitBatch(l.pb, wrote); err != nil {
		return err
	}
	t.mu.Lock()
	// A key the cache holds is of a row absent until now (the bucket held
	// none): an entry made by a write that changed nothing, or by a delete
	// not stored yet. It takes the loaded row; a dirty one stores it again.
	if len(t.mu.cache.rows) > 0 {
		var from loadedEnd
		for _, to := range l.ends {
			if e, ok := t.mu.cache.rows[string(l.keys[from.key:to.key])]; ok {
				e.row = bytes.Clone(l.rows[from.row:to.row])
			}
			from = to
		}
	}
	t.mu.buckets[l.bucket] = s
	t.appendedLocked(wrote)
	t.mu.Unlock()
	l.end = s.LogEnd
	l.n, l.recs, l.keys, l.rows, l.ends = 0, l.recs[:0], l.keys[:0], l.rows[:0], l.ends[:0]
	return nil
}
