package aggmerge

import (
	"errors"
	"fmt"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// The key filter. A table with more rows than the row cache holds cannot
// answer a cache miss from the cache: the write reads the row from pebble,
// and for a key the table does not hold pebble looks in every level, down
// to its sstables' data blocks (issue #17: 74 % of the CPU of writing 4M
// new keys). The key filter is a Bloom filter of the keys of the table's
// rows, kept while the cache is not complete: a key it has not is of no
// row, and its write reads nothing.
//
// It may say "maybe" of a key of no row (a false positive, or a row
// deleted since: deletes leave it as it is) but never "no" of a key of a
// row, or a write would merge into nothing and lose the row. So every row
// that comes to exist is added before a cache miss can be asked about it:
// buildKeys adds every stored row and every row the cache holds (which
// holds every row not stored yet, rows.go); commit adds the rows an Apply
// inserts, undo's included, before the cache could drop their entries;
// Load adds its rows before it commits them. Open builds it when the rows
// do not fit the cache; otherwise the first eviction leaves the cache
// incomplete and the next miss builds it. Once it holds more keys than it
// was sized for it still answers correctly, only with more false
// positives, and the next miss rebuilds it twice as large.

// keyFilterFP is the false positive rate at the planned key count: 9.6
// bits (1.2 bytes) of memory per key, 7 hash probes per insert. A false
// positive costs one pebble read, what every miss cost before.
const keyFilterFP = 0.01

// keyFilter is the key filter and its fill.
type keyFilter struct {
	f    *bloom.BloomFilter
	plan uint // the keys it was sized for
	n    uint // the keys added, some perhaps twice
}

func newKeyFilter(plan uint) *keyFilter {
	return &keyFilter{f: bloom.NewWithEstimates(plan, keyFilterFP), plan: plan}
}

func (k *keyFilter) add(key []byte) {
	k.f.Add(key)
	k.n++
}

func (k *keyFilter) addString(key string) {
	k.f.AddString(key)
	k.n++
}

// has reports whether key may be the key of a row; false is certain.
func (k *keyFilter) has(key []byte) bool { return k.f.Test(key) }

// full reports whether it holds more keys than it was sized for.
func (k *keyFilter) full() bool { return k.n > k.plan }

// buildKeys builds the key filter, sized for twice the table's rows (at
// least Options.CacheRows: it is built when they fill the cache), from
// the stored rows' keys and the cached rows. The caller holds writeMu, so
// the cache changes only by a store settling, which takes writeMu too: a
// row being stored is either in the iterator's view (its store committed
// before it) or still pinned in the cache. It reads no values.
func (t *Table) buildKeys() error {
	var rows uint64
	t.mu.RLock()
	for _, s := range t.mu.buckets {
		rows += s.Rows
	}
	t.mu.RUnlock()
	k := newKeyFilter(uint(max(2*rows, uint64(t.opts.CacheRows))))
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: []byte{encoding.PrefixRow}, UpperBound: []byte{encoding.PrefixRow + 1}})
	if err != nil {
		return fmt.Errorf("build the key filter: %w", t.pebbleErr(err))
	}
	prefix := len(encoding.RowPrefix(nil, 0))
	for it.First(); it.Valid(); it.Next() {
		k.add(it.Key()[prefix:])
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("build the key filter: %w", t.pebbleErr(err))
	}
	for _, e := range t.mu.cache.rows {
		if e.row != nil {
			k.addString(e.key)
		}
	}
	t.mu.Lock()
	t.mu.cache.keys = k
	t.mu.Unlock()
	return nil
}

// checkAbsent panics if pebble holds the row of key, which the row cache
// and the key filter say is absent: a write would lose it. For builds with
// the invariants tag; the caller holds writeMu.
func (t *Table) checkAbsent(bucket uint32, key []byte) {
	_, closer, err := t.db.Get(append(encoding.RowPrefix(nil, bucket), key...))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		panic(fmt.Sprintf("aggmerge: check an absent row: %v", err))
	default:
		_ = closer.Close()
		panic(fmt.Sprintf("aggmerge: the row cache (complete %v) and key filter (%v) say absent a stored row of bucket %d key %x",
			t.mu.cache.complete, t.mu.cache.keys != nil, bucket, key))
	}
}
