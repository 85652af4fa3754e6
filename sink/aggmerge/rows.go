package aggmerge

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// Rows are stored lazily. An Apply writes only its log chunks (and bucket
// states) to pebble and leaves the changed rows dirty in the row cache. The
// table's storer goroutine stores them in one batch after each Sync (so
// after every checkpoint) and whenever half the cache is dirty; it holds
// writeMu only to take the dirty list, so Applies go on while it writes.
// Scan, Truncate and Close store them synchronously. Each bucket's rows
// offset (RowsAtKey) says up to where the stored rows are complete; Open
// replays the log from there. The log is the truth and the stored rows a
// materialisation of it: an Apply writes half as much to pebble, and a row
// is stored once per checkpoint rather than once per change.
//
// Replaying from any offset at or below the true rows offset is correct:
// replay overwrites each key with its after-images in log order, and a key
// whose last change lies below the start is stored. So a rows offset that is
// missing (a table that never stored rows) reads as the log start.

// rowStore is the storer's state.
type rowStore struct {
	// mu makes stores one at a time; it is taken before writeMu.
	mu   sync.Mutex
	kick chan struct{} // wakes the storer; buffered, never blocks
	stop chan struct{} // closed by Close, once (halt)
	done chan struct{} // closed when the storer returns
	halt sync.Once
	// order is writeRows' scratch memory, guarded by mu.
	order []rowOrder
}

// maxDirty is how many dirty rows wake the storer early: a fraction of the
// cache, so that eviction finds clean rows.
func (t *Table) maxDirty() int { return max(t.opts.CacheRows/2, 1) }

// kickStorer asks the storer to store the dirty rows.
func (t *Table) kickStorer() {
	select {
	case t.store.kick <- struct{}{}:
	default:
	}
}

// storer stores the dirty rows when kicked, until Close. A failed store is
// kept (t.mu.storeErr) and fails Applies until a store succeeds: the rows
// stay dirty, so nothing is lost, but pebble is failing. A failing Apply
// kicks the storer to try again.
func (t *Table) storer() {
	defer close(t.store.done)
	for {
		select {
		case <-t.store.stop:
			return
		case <-t.store.kick:
		}
		t.store.mu.Lock()
		err := t.storeRows(false)
		t.store.mu.Unlock()
		t.mu.Lock()
		t.mu.storeErr = err
		t.mu.Unlock()
	}
}

// rowOrder sorts a taken row by bucket and key without reading the row's
// cache entry: the first 16 bytes of the key, big-endian and zero-padded,
// order all keys that differ in them, and only keys that do not are
// compared in full. Sorting the entries themselves read each entry and its
// key from memory at every comparison, scattered over the heap: about 70 %
// of the storer's CPU in a profile of the peers job.
type rowOrder struct {
	hi, lo uint64
	bucket uint32
	i      uint32 // index into the taken rows
}

func newRowOrder(bucket uint32, key string, i int) rowOrder {
	var b [16]byte
	copy(b[:], key)
	return rowOrder{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:]), bucket: bucket, i: uint32(i)}
}

// compare orders by bucket, then by the key's first 16 bytes; 0 means the
// keys must be compared in full.
func (a rowOrder) compare(b rowOrder) int {
	if c := cmp.Compare(a.bucket, b.bucket); c != 0 {
		return c
	}
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// sortRowOrder sorts order by bucket and key; key returns the key of an
// index, for the keys whose first 16 bytes are equal.
func sortRowOrder(order []rowOrder, key func(i uint32) string) {
	slices.SortFunc(order, func(a, b rowOrder) int {
		if c := a.compare(b); c != 0 {
			return c
		}
		return strings.Compare(key(a.i), key(b.i))
	})
}

// storedRow is a dirty row taken for storing.
type storedRow struct {
	e   *cachedRow
	row []byte
}

// storeRows stores the dirty rows and advances each bucket's rows offset to
// its log end as of taking them. The caller holds store.mu; when locked, it
// holds writeMu too, else storeRows takes writeMu to take the rows and to
// settle them once written, not while it writes.
func (t *Table) storeRows(locked bool) error {
	if !locked {
		t.writeMu.Lock()
	}
	// Taken rows are pinned: not evicted before they are stored, or a cache
	// miss would read an older row from pebble.
	rows := make([]storedRow, len(t.dirty))
	for i, e := range t.dirty {
		rows[i] = storedRow{e: e, row: e.row}
		e.dirty, e.pinned = false, true
	}
	clear(t.dirty)
	t.dirty = t.dirty[:0]
	t.mu.RLock()
	ends := make([]uint64, len(t.mu.buckets))
	for i, s := range t.mu.buckets {
		ends[i] = s.LogEnd
	}
	rowsAt := t.mu.rowsAt
	t.mu.RUnlock()
	if !locked {
		t.writeMu.Unlock()
	}
	err := t.writeRows(rows, rowsAt, ends)
	if !locked {
		t.writeMu.Lock()
		defer t.writeMu.Unlock()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range rows {
		r.e.pinned = false
		switch {
		case err != nil && !r.e.dirty: // dirty again, for the next store
			r.e.dirty = true
			t.dirty = append(t.dirty, r.e)
		case err == nil && !r.e.dirty && r.e.row == nil && t.mu.cache.complete:
			delete(t.mu.cache.rows, r.e.key) // a complete cache needs no entry for an absent row
		}
	}
	if err != nil {
		return fmt.Errorf("store rows of %q: %w", t.dir, err)
	}
	t.mu.rowsAt = ends
	return nil
}

// writeRows writes rows and the rows offsets that moved in one batch. The
// rows go in key order: pebble inserts a batch below half its memtable size
// into the memtable's skiplist, where a key following the previous one
// starts from the splice it left, while random keys each search from the
// top of a list that holds the log's entries too. The caller holds
// store.mu (for store.order).
func (t *Table) writeRows(rows []storedRow, from, to []uint64) error {
	order := slices.Grow(t.store.order[:0], len(rows))
	for i, r := range rows {
		order = append(order, newRowOrder(r.e.bucket, r.e.key, i))
	}
	sortRowOrder(order, func(i uint32) string { return rows[i].e.key })
	t.store.order = order
	pb := t.db.NewBatch()
	defer pb.Close()
	prefix := len(encoding.RowPrefix(nil, 0))
	for _, o := range order {
		r := rows[o.i]
		// Each key is encoded in place in the batch, not copied into it.
		var op *pebble.DeferredBatchOp
		if r.row == nil {
			op = pb.DeleteDeferred(prefix + len(r.e.key))
		} else {
			op = pb.SetDeferred(prefix+len(r.e.key), len(r.row))
			copy(op.Value, r.row)
		}
		encoding.RowPrefix(op.Key[:0], r.e.bucket)
		copy(op.Key[prefix:], r.e.key)
		if err := op.Finish(); err != nil {
			return err
		}
	}
	for b := range to {
		if to[b] != from[b] {
			if err := pb.Set(encoding.RowsAtKey(uint32(b)), encoding.AppendRowsAt(nil, to[b]), nil); err != nil {
				return err
			}
		}
	}
	if pb.Empty() {
		return nil
	}
	return pb.Commit(pebble.NoSync)
}

// loadRows reads the rows offsets and replays, for every bucket, the log
// from there to its end into the stored rows: after a crash, the rows the
// last Applies left dirty. It runs at Open, before the row cache is filled.
func (t *Table) loadRows() error {
	t.mu.rowsAt = make([]uint64, len(t.mu.buckets))
	pb := t.db.NewBatch()
	defer pb.Close()
	var key []byte
	for i, s := range t.mu.buckets {
		b := uint32(i)
		from := s.LogStart
		raw, closer, err := t.db.Get(encoding.RowsAtKey(b))
		switch {
		case errors.Is(err, pebble.ErrNotFound):
		case err != nil:
			return err
		default:
			from, err = encoding.DecodeRowsAt(raw)
			_ = closer.Close()
			if err != nil {
				return fmt.Errorf("bucket %d: %w", i, err)
			}
			if from > s.LogEnd {
				return fmt.Errorf("%w: bucket %d rows offset %d beyond the log end %d", ErrCorrupt, i, from, s.LogEnd)
			}
			from = max(from, s.LogStart)
		}
		if from < s.LogEnd {
			if err := t.replay(pb, b, from, s.LogEnd, key); err != nil {
				return fmt.Errorf("bucket %d log: %w", i, err)
			}
		}
		if err := pb.Set(encoding.RowsAtKey(b), encoding.AppendRowsAt(nil, s.LogEnd), nil); err != nil {
			return err
		}
		t.mu.rowsAt[i] = s.LogEnd
	}
	return pb.Commit(pebble.Sync)
}

// replay adds to pb the row changes of a bucket's log in [from, end): each
// key set to its after-image, or deleted.
func (t *Table) replay(pb *pebble.Batch, b uint32, from, end uint64, key []byte) error {
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: encoding.LogKey(b, 0), UpperBound: encoding.LogKey(b, end)})
	if err != nil {
		return err
	}
	// The chunk holding from starts at or before it.
	ok := it.SeekLT(encoding.LogKey(b, from+1))
	if !ok {
		ok = it.First()
	}
	for ; ok; ok = it.Next() {
		_, off, err := encoding.ParseLogKey(it.Key())
		if err != nil {
			return errors.Join(err, it.Close())
		}
		_, recs, err := encoding.DecodeChunk(it.Value())
		if err != nil {
			return errors.Join(err, it.Close())
		}
		for _, r := range recs {
			if off >= from {
				key = append(encoding.RowPrefix(key[:0], b), r.Key...)
				switch r.Op {
				case encoding.OpInsert, encoding.OpUpdate:
					err = pb.Set(key, r.After, nil)
				case encoding.OpDelete:
					err = pb.Delete(key, nil)
				}
				if err != nil {
					return errors.Join(err, it.Close())
				}
			}
			off += r.Op.Offsets()
		}
	}
	return it.Close()
}
