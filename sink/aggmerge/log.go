package aggmerge

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// ChangeOp is the kind of a log entry: a row kind (+I, -U, +U, -D), the
// same type as runtime.RowKind, or MarkerEntry.
type ChangeOp = base.RowKind

// The log entry kinds.
const (
	Insert       = base.Insert       // +I: a new row
	UpdateBefore = base.UpdateBefore // -U: the row before an update
	UpdateAfter  = base.UpdateAfter  // +U: the row after an update
	Delete       = base.Delete       // -D: a removed row
	MarkerEntry  = base.Marker       // a commit or rollback marker
)

// Entry is one log entry. Before and After are the full value columns of
// the row before and after the change (nil where there is no row); an
// update's -U and +U entries both carry both images. Markers have no key.
type Entry struct {
	Offset uint64
	Op     ChangeOp
	Key    []agg.Value
	Before []agg.Value
	After  []agg.Value
	Writer Writer
	Undo   bool
	Marker Marker
	// EncodedKey is the key as EncodeKey encodes it, valid only during
	// the call (nil for markers).
	EncodedKey []byte
	// EncodedAfter is the encoded after-image (DecodeImage decodes it)
	// of an entry that LogRead.Decode left undecoded, valid only during
	// the call; nil otherwise.
	EncodedAfter []byte
}

// LogOffsets returns the first retained offset and the end offset (the next
// offset to be written) of a bucket's log.
func (t *Table) LogOffsets(bucket int) (start, end uint64, err error) {
	if err := t.checkBucket(bucket); err != nil {
		return 0, 0, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := t.mu.buckets[bucket]
	return s.LogStart, s.LogEnd, nil
}

// LogEnds returns the end offset of every bucket's log.
func (t *Table) LogEnds() []uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]uint64, len(t.mu.buckets))
	for i, s := range t.mu.buckets {
		out[i] = s.LogEnd
	}
	return out
}

// WaitLog returns when a bucket's log end is beyond offset, so that a
// reader tailing the log (the changelog exporter) need not poll; or with
// ctx's error when ctx is done first, or ErrClosed when the table closes.
func (t *Table) WaitLog(ctx context.Context, bucket int, offset uint64) error {
	if err := t.checkBucket(bucket); err != nil {
		return err
	}
	for {
		t.mu.RLock()
		end, closed, appended := t.mu.buckets[bucket].LogEnd, t.mu.closed, t.mu.appended
		t.mu.RUnlock()
		switch {
		case closed:
			return ErrClosed
		case end > offset:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-appended:
		}
	}
}

func (t *Table) checkBucket(bucket int) error {
	if bucket < 0 || bucket >= t.schema.Buckets {
		return fmt.Errorf("%w: bucket %d not in [0, %d)", ErrInvalid, bucket, t.schema.Buckets)
	}
	return nil
}

// ReadLog calls fn for each entry of a bucket's log from offset from to the
// end as of the call, in offset order, on one consistent snapshot. Reading
// from the end reads nothing; from beyond the end is ErrBeyondLogEnd, from
// below the retained start ErrBelowLogStart. An error from fn stops the read
// and is returned. The *Entry is reused between calls; its Key, Before and
// After are not and may be kept (EncodedKey is valid only during the call).
func (t *Table) ReadLog(bucket int, from uint64, fn func(*Entry) error) error {
	return t.ReadLogWith(bucket, from, LogRead{}, fn)
}

// LogRead says how ReadLogWith reads a log.
type LogRead struct {
	// Reuse reuses the Entry's Key, Before and After between calls: they
	// are valid only during the call, and a reader that keeps nothing of
	// them saves their allocation.
	Reuse bool
	// MarkersOnly calls fn for the markers only; the other entries are
	// passed over without decoding their keys and images.
	MarkersOnly bool
	// Decode, if set, is asked before a change's key and images are
	// decoded, with the entry's Offset (an update's +U's), Op, Writer,
	// Undo and EncodedKey set. When it says false, the entries of the
	// change come with Key, Before and After nil and the after-image
	// encoded (EncodedAfter): for a reader that needs the images of only
	// some entries.
	Decode func(*Entry) bool
}

// ReadLogWith is ReadLog read as o says.
func (t *Table) ReadLogWith(bucket int, from uint64, o LogRead, fn func(*Entry) error) error {
	if err := t.checkBucket(bucket); err != nil {
		return err
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	// The snapshot's own bucket state gives offsets that match its chunks.
	snap := t.db.NewSnapshot()
	defer snap.Close()
	b := uint32(bucket)
	raw, closer, err := snap.Get(encoding.BucketKey(b))
	if err != nil {
		return fmt.Errorf("read log of %q bucket %d: %w", t.dir, bucket, t.pebbleErr(err))
	}
	s, err := encoding.DecodeBucketState(raw)
	_ = closer.Close()
	if err != nil {
		return fmt.Errorf("read log of %q bucket %d: %w", t.dir, bucket, err)
	}
	start, end := s.LogStart, s.LogEnd
	switch {
	case from > end:
		return fmt.Errorf("read log of %q bucket %d from %d: %w %d", t.dir, bucket, from, ErrBeyondLogEnd, end)
	case from < start:
		return fmt.Errorf("read log of %q bucket %d from %d: %w %d", t.dir, bucket, from, ErrBelowLogStart, start)
	case from == end:
		return nil
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: encoding.LogKey(b, 0), UpperBound: encoding.LogKey(b, end)})
	if err != nil {
		return fmt.Errorf("read log of %q bucket %d: %w", t.dir, bucket, err)
	}
	defer it.Close()
	// The chunk holding from starts at or before it.
	ok := it.SeekLT(encoding.LogKey(b, from+1))
	if !ok {
		ok = it.First()
	}
	r := logReader{t: t, bucket: b, from: from, o: o, fn: fn}
	for ; ok; ok = it.Next() {
		if err := r.chunk(it.Key(), it.Value()); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("read log of %q bucket %d: %w", t.dir, bucket, t.pebbleErr(err))
	}
	return nil
}

// logReader decodes the chunks of one ReadLogWith.
type logReader struct {
	t      *Table
	bucket uint32
	from   uint64
	o      LogRead
	fn     func(*Entry) error
	e      Entry
	// With o.Reuse: the slices decoded into, kept between entries.
	key, before, after []agg.Value
}

func (lr *logReader) chunk(k, v []byte) error {
	t, e := lr.t, &lr.e
	_, off, err := encoding.ParseLogKey(k)
	if err != nil {
		return fmt.Errorf("read log of %q bucket %d: %w", t.dir, lr.bucket, err)
	}
	h, recs, err := encoding.DecodeChunk(v)
	if err != nil {
		return fmt.Errorf("read log of %q bucket %d at %d: %w", t.dir, lr.bucket, off, err)
	}
	for _, r := range recs {
		n := r.Op.Offsets()
		if off+n <= lr.from || (lr.o.MarkersOnly && r.Op != encoding.OpMarker) {
			off += n
			continue
		}
		*e = Entry{Writer: Writer{ID: h.Writer, Epoch: h.Epoch}, Undo: h.Undo, Marker: r.Marker}
		if r.Op != encoding.OpMarker {
			e.EncodedKey = r.Key
			if lr.o.Decode != nil {
				ops := entryOps(r.Op)
				e.Offset, e.Op = off+n-1, ops[len(ops)-1]
			}
			if lr.o.Decode == nil || lr.o.Decode(e) {
				if err := lr.decode(r); err != nil {
					return fmt.Errorf("read log of %q bucket %d at %d: %w", t.dir, lr.bucket, off, err)
				}
			} else {
				e.EncodedAfter = r.After
			}
		}
		for _, op := range entryOps(r.Op) {
			if off >= lr.from {
				e.Offset, e.Op = off, op
				if err := lr.fn(e); err != nil {
					return err
				}
			}
			off++
		}
	}
	return nil
}

// DecodeImage decodes an encoded row image (Entry.EncodedAfter) into dst.
func (t *Table) DecodeImage(enc []byte, dst []agg.Value) ([]agg.Value, error) {
	vals, err := encoding.DecodeRow(enc, t.valTypes, dst[:0])
	if err != nil {
		return nil, fmt.Errorf("%w: log image: %v", ErrCorrupt, err)
	}
	return vals, nil
}

// decode decodes r's key and images into the entry, into the slices of the
// previous entry with o.Reuse.
func (lr *logReader) decode(r encoding.Record) error {
	t, e := lr.t, &lr.e
	if !lr.o.Reuse {
		lr.key, lr.before, lr.after = nil, nil, nil
	}
	var err error
	if lr.key, err = encoding.DecodeKey(r.Key, t.keyTypes, lr.key); err != nil {
		return err
	}
	e.Key = lr.key
	if r.Before != nil {
		if lr.before, err = encoding.DecodeRow(r.Before, t.valTypes, lr.before); err != nil {
			return err
		}
		e.Before = lr.before
	}
	if r.After != nil {
		if lr.after, err = encoding.DecodeRow(r.After, t.valTypes, lr.after); err != nil {
			return err
		}
		e.After = lr.after
	}
	return nil
}

var (
	opsInsert = []ChangeOp{Insert}
	opsUpdate = []ChangeOp{UpdateBefore, UpdateAfter}
	opsDelete = []ChangeOp{Delete}
	opsMarker = []ChangeOp{MarkerEntry}
)

func entryOps(op encoding.Op) []ChangeOp {
	switch op {
	case encoding.OpInsert:
		return opsInsert
	case encoding.OpUpdate:
		return opsUpdate
	case encoding.OpDelete:
		return opsDelete
	}
	return opsMarker
}

// Truncate drops a bucket's log entries below offset below. Entries are
// dropped in whole chunks (the entries of one batch), so some entries below
// the offset may stay; none at or above it is ever dropped. Truncating
// beyond the end is ErrBeyondLogEnd.
func (t *Table) Truncate(bucket int, below uint64) error {
	if err := t.checkBucket(bucket); err != nil {
		return err
	}
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkOpen(); err != nil {
		return err
	}
	start, end, err := t.LogOffsets(bucket)
	if err != nil {
		return err
	}
	if below > end {
		return fmt.Errorf("truncate log of %q bucket %d below %d: %w %d", t.dir, bucket, below, ErrBeyondLogEnd, end)
	}
	if below <= start {
		return nil
	}
	b := uint32(bucket)
	keep := end // first offset of the chunk holding below; end when below == end
	if below < end {
		it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: encoding.LogKey(b, 0), UpperBound: encoding.LogKey(b, end)})
		if err != nil {
			return fmt.Errorf("truncate log of %q bucket %d: %w", t.dir, bucket, err)
		}
		if it.SeekLT(encoding.LogKey(b, below+1)) {
			_, keep, err = encoding.ParseLogKey(it.Key())
		}
		if cerr := it.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("truncate log of %q bucket %d: %w", t.dir, bucket, err)
		}
	}
	if keep <= start {
		return nil
	}
	t.mu.RLock()
	rowsAt := t.mu.rowsAt[bucket]
	t.mu.RUnlock()
	if rowsAt < keep { // the stored rows must not need what goes
		if err := t.storeRows(true); err != nil {
			return err
		}
	}
	t.mu.RLock()
	s := t.mu.buckets[bucket]
	t.mu.RUnlock()
	s.LogStart = keep
	pb := t.db.NewBatch()
	defer pb.Close()
	_ = pb.DeleteRange(encoding.LogKey(b, 0), encoding.LogKey(b, keep), nil)
	_ = pb.Set(encoding.BucketKey(b), encoding.AppendBucketState(nil, s), nil)
	if err := pb.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("truncate log of %q bucket %d: %w", t.dir, bucket, err)
	}
	t.mu.Lock()
	t.mu.buckets[bucket] = s
	t.mu.Unlock()
	return nil
}
