package aggmerge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbflow/ebbflow/internal/invariants"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// Result tells what an Apply changed.
type Result struct {
	Entries   int // log entries appended (an update counts two)
	Unchanged int // writes that left their row as it was
}

// applyState is the writer's scratch memory, reused across Applies; it is
// guarded by writeMu. gen numbers the Applies: a cache entry whose gen is
// the running Apply's holds that Apply's pending row.
type applyState struct {
	gen     uint64
	touched []*cachedRow // entries with a pending row
	chunks  []chunkBuf   // by bucket
	used    []uint32     // buckets with records, in first-use order
	oldVals []agg.Value
	newVals []agg.Value
	rowKey  []byte
	row     []byte // the row being encoded
	chunk   []byte // a chunk's header
}

type chunkBuf struct {
	n       int    // records
	offsets uint64 // offsets taken
	recs    []byte
	rows    int64 // row count delta
}

// Apply applies the batch atomically: for each write it reads the old row,
// merges, and appends the log entries, all in one pebble batch, so rows and
// log never disagree. A write that leaves its row unchanged appends nothing.
// On error nothing is applied. The batch may be reused after Reset.
func (t *Table) Apply(b *Batch) (Result, error) {
	if b.t != t {
		return Result{}, fmt.Errorf("%w: batch of another table", ErrInvalid)
	}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkWritable(); err != nil {
		return Result{}, err
	}
	wrote, err := t.checkWriter(b.writer, b.cols)
	if err != nil {
		return Result{}, err
	}
	st := t.applyState()
	defer st.reset()
	var res Result
	for i := range b.writes {
		w := &b.writes[i]
		key := b.keys[w.keyStart:w.keyEnd]
		changed, err := t.applyWrite(st, b, w, key)
		if err != nil {
			return Result{}, t.writeError(i, key, err)
		}
		if !changed {
			res.Unchanged++
		}
	}
	for _, m := range b.marks {
		st.record(m.bucket, encoding.Record{Op: encoding.OpMarker, Marker: m.m}, 0)
	}
	if err := t.commit(st, b, &res, wrote); err != nil {
		return Result{}, err
	}
	return res, nil
}

// checkWritable returns why the table takes no write now: closed or
// corrupt, short of space, or its last background store failed (then it
// asks the storer to try again). The caller holds writeMu.
func (t *Table) checkWritable() error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	if err := t.space.check(t.opts, t.dir); err != nil {
		return fmt.Errorf("apply batch to %q: %w", t.dir, err)
	}
	t.mu.RLock()
	storeErr := t.mu.storeErr
	t.mu.RUnlock()
	if storeErr != nil {
		t.kickStorer()
		return storeErr
	}
	return nil
}

func (t *Table) applyState() *applyState {
	if t.scratch == nil {
		t.scratch = &applyState{chunks: make([]chunkBuf, t.schema.Buckets)}
	}
	t.scratch.gen++
	return t.scratch
}

func (st *applyState) reset() {
	for _, e := range st.touched {
		e.pending = nil
	}
	clear(st.touched) // drop entry references
	st.touched = st.touched[:0]
	for _, b := range st.used {
		st.chunks[b] = chunkBuf{recs: st.chunks[b].recs[:0]}
	}
	st.used = st.used[:0]
}

func (st *applyState) record(bucket uint32, r encoding.Record, rows int64) {
	c := &st.chunks[bucket]
	if c.n == 0 {
		st.used = append(st.used, bucket)
	}
	c.n++
	c.offsets += r.Op.Offsets()
	c.rows += rows
	c.recs = encoding.AppendRecord(c.recs, r)
}

func (t *Table) writeError(i int, key []byte, err error) error {
	k, kerr := encoding.DecodeKey(key, t.keyTypes, nil)
	if kerr != nil {
		return fmt.Errorf("apply batch to %q: write %d: %w", t.dir, i, err)
	}
	return fmt.Errorf("apply batch to %q: write %d key %v: %w", t.dir, i, k, err)
}

// entry returns the cache entry of key, creating it (from pebble, unless
// the cache or the key filter says the row is absent) when the cache has
// none. Only the writer changes the cache, so it reads it without mu.
func (t *Table) entry(st *applyState, bucket uint32, key []byte) (*cachedRow, error) {
	if e, ok := t.mu.cache.rows[string(key)]; ok {
		return e, nil
	}
	e := &cachedRow{key: string(key), bucket: bucket}
	if t.mu.cache.needKeys() {
		if err := t.buildKeys(); err != nil {
			return nil, err
		}
	}
	absent := t.mu.cache.absent(key, bucket)
	if absent && invariants.Enabled {
		t.checkAbsent(bucket, key)
	}
	if !absent {
		st.rowKey = append(encoding.RowPrefix(st.rowKey[:0], bucket), key...)
		v, closer, err := t.db.Get(st.rowKey)
		switch {
		case errors.Is(err, pebble.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			e.row = append([]byte(nil), v...)
			if err := closer.Close(); err != nil {
				return nil, err
			}
		}
	}
	t.mu.Lock()
	t.mu.cache.add(e, st.gen)
	t.mu.Unlock()
	return e, nil
}

// applyWrite merges one write into the batch's view of its row and records
// its log entries. It reports whether the row changed.
func (t *Table) applyWrite(st *applyState, b *Batch, w *write, key []byte) (bool, error) {
	e, err := t.entry(st, w.bucket, key)
	if err != nil {
		return false, err
	}
	old := e.row
	if e.gen == st.gen {
		old = e.pending
	}
	if w.del && w.mode == Aggregate {
		switch t.schema.Delete {
		case DeleteIgnore:
			return false, nil
		case DeleteReject:
			return false, ErrDeleteRejected
		}
	}
	if old == nil && w.del && w.mode != Retract {
		return false, nil
	}
	n := len(t.valTypes)
	st.oldVals = st.oldVals[:0]
	if old != nil {
		if st.oldVals, err = encoding.DecodeRow(old, t.valTypes, st.oldVals); err != nil {
			return false, fmt.Errorf("%w: stored row: %v", ErrCorrupt, err)
		}
	} else {
		st.oldVals = append(st.oldVals, make([]agg.Value, n)...)
	}
	st.newVals = append(st.newVals[:0], st.oldVals...)
	for j, c := range b.cols {
		var in agg.Value
		if w.val >= 0 {
			in = b.vals[w.val+j]
		}
		var v agg.Value
		switch {
		case w.mode == Retract:
			v, err = t.funcs[c].Retract(st.oldVals[c], in)
		case w.del: // a clear: Aggregate with delete allowed, or Overwrite
		case w.mode == Overwrite:
			v = in
		case w.mode == Partial:
			v, err = t.funcs[c].MergePartial(st.oldVals[c], in)
		default:
			v, err = t.funcs[c].Merge(st.oldVals[c], in)
		}
		if err != nil {
			return false, fmt.Errorf("column %q: %w", t.schema.Values[c].Name, err)
		}
		st.newVals[c] = v
	}
	var row []byte
	keep := (w.mode == Aggregate || w.mode == Partial) && !w.del
	if keep || !allNull(st.newVals) {
		// Encoded into scratch memory first: an unchanged row allocates
		// nothing, a changed one once, at its size.
		st.row = encoding.AppendRow(st.row[:0], t.valTypes, st.newVals)
		if bytes.Equal(old, st.row) {
			return false, nil
		}
		row = bytes.Clone(st.row)
	}
	if old == nil && row == nil {
		return false, nil
	}
	if e.gen != st.gen {
		e.gen = st.gen
		st.touched = append(st.touched, e)
	}
	e.pending = row
	switch {
	case old == nil:
		st.record(w.bucket, encoding.Record{Op: encoding.OpInsert, Key: key, After: row}, 1)
	case row == nil:
		st.record(w.bucket, encoding.Record{Op: encoding.OpDelete, Key: key, Before: old}, -1)
	default:
		st.record(w.bucket, encoding.Record{Op: encoding.OpUpdate, Key: key, Before: old, After: row}, 0)
	}
	return true, nil
}

func allNull(vals []agg.Value) bool {
	for _, v := range vals {
		if !v.IsNull() {
			return false
		}
	}
	return true
}

// commit writes the log chunks and bucket states in one pebble batch, then
// updates the cache, whose changed rows stay dirty until the storer stores
// them (see rows.go), and the in-memory bucket states. wrote, if not nil,
// is the writer's registration to store with its first change of a row.
func (t *Table) commit(st *applyState, b *Batch, res *Result, wrote *Registration) error {
	if len(st.touched) == 0 && len(st.used) == 0 {
		return nil
	}
	pb := t.db.NewBatch()
	defer pb.Close()
	t.mu.RLock()
	states := make([]encoding.BucketState, len(st.used))
	for i, bk := range st.used {
		states[i] = t.mu.buckets[bk]
	}
	t.mu.RUnlock()
	h := encoding.ChunkHeader{Writer: b.writer.ID, Epoch: b.writer.Epoch, Undo: b.undo}
	for i, bk := range st.used {
		c := &st.chunks[bk]
		s := &states[i]
		// The chunk is written into the batch in place: its header, then
		// the records, copied once.
		st.chunk = encoding.AppendChunkHeader(st.chunk[:0], h, c.n)
		key := encoding.LogKey(bk, s.LogEnd)
		op := pb.SetDeferred(len(key), len(st.chunk)+len(c.recs))
		copy(op.Key, key)
		copy(op.Value[copy(op.Value, st.chunk):], c.recs)
		if err := op.Finish(); err != nil {
			return fmt.Errorf("apply batch to %q: %w", t.dir, err)
		}
		s.LogEnd += c.offsets
		s.Rows = uint64(int64(s.Rows) + c.rows)
		res.Entries += int(c.offsets)
		if err := pb.Set(encoding.BucketKey(bk), encoding.AppendBucketState(nil, *s), nil); err != nil {
			return fmt.Errorf("apply batch to %q: %w", t.dir, err)
		}
	}
	if len(st.touched) == 0 {
		wrote = nil // markers only
	}
	if err := t.commitBatch(pb, wrote); err != nil {
		return err
	}
	t.mu.Lock()
	keys := t.mu.cache.keys
	for _, e := range st.touched {
		if e.row == nil && e.pending != nil && keys != nil {
			keys.addString(e.key) // an insert: before the entry can be evicted
		}
		e.row = e.pending
		if !e.dirty {
			e.dirty = true
			t.dirty = append(t.dirty, e)
		}
	}
	for i, bk := range st.used {
		t.mu.buckets[bk] = states[i]
	}
	t.appendedLocked(wrote)
	t.mu.Unlock()
	if len(t.dirty) >= t.maxDirty() {
		t.kickStorer()
	}
	return nil
}

// commitBatch commits a batch of log chunks and bucket states, with the
// writer's registration wrote (if not nil), synced with Options.SyncWrites.
func (t *Table) commitBatch(pb *pebble.Batch, wrote *Registration) error {
	if wrote != nil {
		raw, err := json.Marshal(*wrote)
		if err != nil {
			return err
		}
		if err := pb.Set(encoding.MetaKey(metaWriterPrefix+wrote.Writer), raw, nil); err != nil {
			return fmt.Errorf("apply batch to %q: %w", t.dir, err)
		}
	}
	opt := pebble.NoSync
	if t.opts.SyncWrites {
		opt = pebble.Sync
	}
	if err := pb.Commit(opt); err != nil {
		return fmt.Errorf("apply batch to %q: %w", t.dir, t.pebbleErr(err))
	}
	return nil
}

// appendedLocked records, after a commit that appended to logs, the
// writer's registration wrote (if not nil) and wakes WaitLog. The caller
// holds mu.
func (t *Table) appendedLocked(wrote *Registration) {
	if wrote != nil {
		t.mu.writers[wrote.Writer] = *wrote
	}
	close(t.mu.appended)
	t.mu.appended = make(chan struct{})
}
