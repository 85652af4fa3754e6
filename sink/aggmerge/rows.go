package aggmerge

import (
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// Rows are stored lazily. An Apply writes only its log chunks (and bucket
// states) to pebble and leaves the changed rows dirty in the row cache;
// persistRows stores them later in one batch, at Sync (so at every
// checkpoint), before a Scan or a log truncation, at Close, and when too
// many are dirty. Each bucket's RowsAt says up to where the stored rows are
// complete; Open replays the log from there (recoverRows). The log is the
// truth, the stored rows a materialisation of it: this halves the pebble
// writes of an Apply and stores a row once per checkpoint, not once per
// change.

// maxDirty is how many dirty rows make an Apply store them: a fraction of
// the cache, so that eviction always finds clean rows.
func (t *Table) maxDirty() int { return max(t.opts.CacheRows/2, 1) }

// persistRows stores every dirty row and advances each bucket's RowsAt to
// its log end. The caller holds writeMu.
func (t *Table) persistRows() error {
	if len(t.dirty) == 0 {
		return nil
	}
	pb := t.db.NewBatch()
	defer pb.Close()
	var key []byte
	for _, e := range t.dirty {
		key = append(encoding.RowPrefix(key[:0], e.bucket), e.key...)
		var err error
		if e.row == nil {
			err = pb.Delete(key, nil)
		} else {
			err = pb.Set(key, e.row, nil)
		}
		if err != nil {
			return fmt.Errorf("store rows of %q: %w", t.dir, err)
		}
	}
	t.mu.RLock()
	states := slices.Clone(t.mu.buckets)
	t.mu.RUnlock()
	for i := range states {
		if states[i].RowsAt == states[i].LogEnd {
			continue
		}
		states[i].RowsAt = states[i].LogEnd
		if err := pb.Set(encoding.BucketKey(uint32(i)), encoding.AppendBucketState(nil, states[i]), nil); err != nil {
			return fmt.Errorf("store rows of %q: %w", t.dir, err)
		}
	}
	if err := pb.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("store rows of %q: %w", t.dir, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range states {
		t.mu.buckets[i].RowsAt = states[i].RowsAt
	}
	for _, e := range t.dirty {
		e.dirty = false
		if e.row == nil {
			t.mu.cache.del(e.key) // no need to remember an absent row
		}
	}
	clear(t.dirty)
	t.dirty = t.dirty[:0]
	return nil
}

// recoverRows replays, for every bucket, the log from RowsAt to the end
// into the stored rows: after a crash, the rows the last Applies left dirty.
// It runs at Open, before the row cache is filled.
func (t *Table) recoverRows() error {
	pb := t.db.NewBatch()
	defer pb.Close()
	var key []byte
	for i := range t.mu.buckets {
		s := &t.mu.buckets[i]
		if s.RowsAt == s.LogEnd {
			continue
		}
		b := uint32(i)
		it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: encoding.LogKey(b, s.RowsAt), UpperBound: encoding.LogKey(b, s.LogEnd)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			_, recs, err := encoding.DecodeChunk(it.Value())
			if err != nil {
				_ = it.Close()
				return fmt.Errorf("bucket %d log: %w", i, err)
			}
			for _, r := range recs {
				key = append(encoding.RowPrefix(key[:0], b), r.Key...)
				switch r.Op {
				case encoding.OpInsert, encoding.OpUpdate:
					err = pb.Set(key, r.After, nil)
				case encoding.OpDelete:
					err = pb.Delete(key, nil)
				}
				if err != nil {
					_ = it.Close()
					return err
				}
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
		s.RowsAt = s.LogEnd
		if err := pb.Set(encoding.BucketKey(b), encoding.AppendBucketState(nil, *s), nil); err != nil {
			return err
		}
	}
	if pb.Empty() {
		return nil
	}
	return pb.Commit(pebble.Sync)
}
