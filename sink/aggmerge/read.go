package aggmerge

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// Row is one row of a table: its key and value columns in schema order.
type Row struct {
	Key    []agg.Value
	Values []agg.Value
}

// Get returns the row of key, from the row cache when it holds it.
func (t *Table) Get(key []agg.Value) (Row, bool, error) {
	k, err := t.EncodeKey(key)
	if err != nil {
		return Row{}, false, err
	}
	bucket := uint32(BucketOf(k, t.schema.Buckets))
	if err := t.checkOpen(); err != nil {
		return Row{}, false, err
	}
	t.mu.RLock()
	if t.mu.closed {
		t.mu.RUnlock()
		return Row{}, false, ErrClosed
	}
	raw, known := t.mu.cache.get(k, bucket)
	t.mu.RUnlock()
	if !known {
		v, closer, err := t.db.Get(append(encoding.RowPrefix(nil, bucket), k...))
		if errors.Is(err, pebble.ErrNotFound) {
			return Row{}, false, nil
		}
		if err != nil {
			return Row{}, false, fmt.Errorf("get from %q: %w", t.dir, t.pebbleErr(err))
		}
		raw = append([]byte(nil), v...)
		if err := closer.Close(); err != nil {
			return Row{}, false, fmt.Errorf("get from %q: %w", t.dir, err)
		}
	}
	if raw == nil {
		return Row{}, false, nil
	}
	vals, err := encoding.DecodeRow(raw, t.valTypes, nil)
	if err != nil {
		return Row{}, false, fmt.Errorf("get from %q: %w: %v", t.dir, ErrCorrupt, err)
	}
	return Row{Key: append([]agg.Value(nil), key...), Values: vals}, true, nil
}

// Count returns the number of rows.
func (t *Table) Count() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var n uint64
	for _, b := range t.mu.buckets {
		n += b.Rows
	}
	return n
}

// Scan calls fn for every row, bucket by bucket, on one consistent snapshot.
// The row's slices are reused: they are valid only during the call. An error from fn stops
// the scan and is returned.
func (t *Table) Scan(fn func(Row) error) error { return t.ScanPrefix(nil, fn) }

// ScanPrefix calls fn for every row whose key starts with the given leading
// key values, bucket by bucket, on one consistent snapshot.
func (t *Table) ScanPrefix(prefix []agg.Value, fn func(Row) error) error {
	if len(prefix) > len(t.keyTypes) {
		return fmt.Errorf("%w: prefix of %d values for a key of %d", ErrInvalid, len(prefix), len(t.keyTypes))
	}
	p, err := t.appendKey(nil, prefix, len(prefix))
	if err != nil {
		return err
	}
	it, err := t.rowIter()
	if err != nil {
		return fmt.Errorf("scan %q: %w", t.dir, t.pebbleErr(err))
	}
	err = t.scan(it, p, fn)
	if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("scan %q: %w", t.dir, t.pebbleErr(cerr))
	}
	return err
}

// ScanBucket calls fn for every row of one bucket, with its key also as
// encoded by AppendKey, on one consistent snapshot. The key and the row's
// slices are reused: they are valid only during the call.
func (t *Table) ScanBucket(bucket int, fn func(key []byte, r Row) error) error {
	if err := t.checkBucket(bucket); err != nil {
		return err
	}
	it, err := t.rowIter()
	if err != nil {
		return fmt.Errorf("scan %q: %w", t.dir, t.pebbleErr(err))
	}
	var key, vals []agg.Value
	err = t.scanBucket(it, uint32(bucket), nil, &key, &vals, fn)
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("scan %q bucket %d: %w", t.dir, bucket, t.pebbleErr(err))
	}
	return nil
}

// rowIter stores the dirty rows and opens an iterator over the rows before
// any other write: a snapshot of the rows at one point of the log.
func (t *Table) rowIter() (*pebble.Iterator, error) {
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkOpen(); err != nil {
		return nil, err
	}
	if err := t.storeRows(true); err != nil {
		return nil, err
	}
	return t.db.NewIter(&pebble.IterOptions{LowerBound: []byte{encoding.PrefixRow}, UpperBound: []byte{encoding.PrefixRow + 1}})
}

// scan walks the rows of every bucket under the encoded key prefix p. One
// iterator is one snapshot, however many times it seeks.
func (t *Table) scan(it *pebble.Iterator, p []byte, fn func(Row) error) error {
	return t.scanKeys(it, p, func(_ []byte, r Row) error { return fn(r) })
}

// scanKeys is scan with each row's encoded key (as AppendKey encodes it).
func (t *Table) scanKeys(it *pebble.Iterator, p []byte, fn func([]byte, Row) error) error {
	var key, vals []agg.Value
	for b := range uint32(t.schema.Buckets) {
		if err := t.scanBucket(it, b, p, &key, &vals, fn); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("scan %q: %w", t.dir, t.pebbleErr(err))
	}
	return nil
}

// scanBucket walks the rows of bucket b under the encoded key prefix p,
// decoding into *key and *vals (reused).
func (t *Table) scanBucket(it *pebble.Iterator, b uint32, p []byte, key, vals *[]agg.Value, fn func([]byte, Row) error) error {
	lo := append(encoding.RowPrefix(nil, b), p...)
	for ok := it.SeekGE(lo); ok && hasPrefix(it.Key(), lo); ok = it.Next() {
		k := it.Key()[len(lo)-len(p):]
		var err error
		if *key, err = encoding.DecodeKey(k, t.keyTypes, *key); err != nil {
			return fmt.Errorf("scan %q: %w: %v", t.dir, ErrCorrupt, err)
		}
		if *vals, err = encoding.DecodeRow(it.Value(), t.valTypes, *vals); err != nil {
			return fmt.Errorf("scan %q: %w: %v", t.dir, ErrCorrupt, err)
		}
		if err := fn(k, Row{Key: *key, Values: *vals}); err != nil {
			return err
		}
	}
	return nil
}

func hasPrefix(k, p []byte) bool { return len(k) >= len(p) && string(k[:len(p)]) == string(p) }

// RowSet is a table's rows as of one point of its log, captured by RowsAt.
// The rows stay encoded as the table stores them and are decoded as they
// are read (Each): capturing a table costs the copy of its rows, not their
// decoding. It is immutable, so readers may share it.
type RowSet struct {
	keyTypes, valTypes []agg.Type
	n                  int
	// data holds each row in turn: its key (as AppendKey encodes it) and
	// its value columns (encoding.AppendRow), each after its length as a
	// uvarint.
	data []byte
}

// Len returns the number of rows.
func (s *RowSet) Len() int { return s.n }

// Each calls fn for every row, in no particular order, with its key as
// AppendKey encodes it. The key and the row's slices are reused: they are
// valid only during the call. An error from fn stops it and is returned.
func (s *RowSet) Each(fn func(key []byte, r Row) error) error {
	var key, vals []agg.Value
	for b := s.data; len(b) > 0; {
		k, rest := cut(b)
		v, rest := cut(rest)
		if k == nil || v == nil {
			return fmt.Errorf("%w: row set cut short", ErrCorrupt)
		}
		b = rest
		var err error
		if key, err = encoding.DecodeKey(k, s.keyTypes, key); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if vals, err = encoding.DecodeRow(v, s.valTypes, vals); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if err := fn(k, Row{Key: key, Values: vals}); err != nil {
			return err
		}
	}
	return nil
}

// add appends the row of encoded key k and values v.
func (s *RowSet) add(k, v []byte) {
	s.data = append(binary.AppendUvarint(s.data, uint64(len(k))), k...)
	s.data = append(binary.AppendUvarint(s.data, uint64(len(v))), v...)
	s.n++
}

// cut splits b into the bytes its leading uvarint length counts and the
// rest; nil when b is too short.
func cut(b []byte) (field, rest []byte) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil
	}
	return b[w : w+int(n) : w+int(n)], b[w+int(n):]
}

// RowsAt captures the rows as they were when each bucket b's log ended at
// at[b] (a past log end; at holds one offset per bucket): the rows now and,
// for each key changed since, the before-image of its first change at or
// past at[b]. It reads the log from at[b], so it costs the writes since
// then and is bounded by log retention: an offset below a bucket's
// retained log start is ErrBelowLogStart, one beyond its end
// ErrBeyondLogEnd.
func (t *Table) RowsAt(at []uint64) (*RowSet, error) {
	if len(at) != t.schema.Buckets {
		return nil, fmt.Errorf("%w: %d log offsets for %d buckets", ErrInvalid, len(at), t.schema.Buckets)
	}
	// The rows first, then the log from at to an end at or past theirs:
	// every key changed between at and the rows' point is in the log read.
	it, err := t.rowIter()
	if err != nil {
		return nil, fmt.Errorf("scan %q: %w", t.dir, t.pebbleErr(err))
	}
	defer it.Close()
	then, err := t.changedSince(at)
	if err != nil {
		return nil, err
	}
	s := &RowSet{keyTypes: t.keyTypes, valTypes: t.valTypes}
	for b := range uint32(t.schema.Buckets) {
		lo := encoding.RowPrefix(nil, b)
		for ok := it.SeekGE(lo); ok && hasPrefix(it.Key(), lo); ok = it.Next() {
			k := it.Key()[len(lo):]
			if _, changed := then[string(k)]; !changed {
				s.add(k, it.Value())
			}
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("scan %q: %w", t.dir, t.pebbleErr(err))
	}
	for k, v := range then {
		if v != nil { // nil: no row at at
			s.add([]byte(k), v)
		}
	}
	return s, nil
}

// changedSince returns, per encoded key changed since the log ends at, its
// row then (encoded; nil when it had none): the before-image of its first
// change at or past at[b].
func (t *Table) changedSince(at []uint64) (map[string][]byte, error) {
	then := map[string][]byte{}
	var k []byte
	for b, from := range at {
		err := t.ReadLog(b, from, func(e *Entry) error {
			if e.Op == MarkerEntry {
				return nil
			}
			var err error
			if k, err = t.AppendKey(k[:0], e.Key); err != nil {
				return fmt.Errorf("%w: log entry %d of bucket %d: %v", ErrCorrupt, e.Offset, b, err)
			}
			if _, seen := then[string(k)]; !seen {
				var v []byte
				if e.Before != nil {
					v = encoding.AppendRow(nil, t.valTypes, e.Before)
				}
				then[string(k)] = v
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("scan %q as of log offset %d of bucket %d: %w", t.dir, from, b, err)
		}
	}
	return then, nil
}
