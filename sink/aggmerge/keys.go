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
// incomplete and the next miss builds it. It grows as a scalable Bloom
// filter (Almeida et al., 2007) does: once its newest filter holds the keys
// it was sized for, adds go to a new one twice as large, with half the
// false positive rate, so that all of them together keep below twice
// keyFilterFP; a key is absent when no filter has it. Growing so costs no
// scan of the rows: rebuilding from them at each doubling cost 17 % of the
// CPU of writing 4M new keys.

// keyFilterFP is the false positive rate of the first filter at its
// planned key count: 9.6 bits (1.2 bytes) of memory per key, 7 hash probes
// per insert. A false positive costs one pebble read, what every miss cost
// before.
const keyFilterFP = 0.01

// keyFilter is the key filter: its filters, oldest first, and the newest
// one's fill.
type keyFilter struct {
	fs   []*bloom.BloomFilter
	plan uint // the keys the newest was sized for
	n    uint // the keys added to the newest, some perhaps twice
}

func newKeyFilter(plan uint) *keyFilter {
	k := &keyFilter{}
	k.grow(plan)
	return k
}

// grow adds a filter for plan keys.
func (k *keyFilter) grow(plan uint) {
	fp := keyFilterFP / float64(uint64(1)<<min(len(k.fs), 30))
	k.fs = append(k.fs, bloom.NewWithEstimates(plan, fp))
	k.plan, k.n = plan, 0
}

func (k *keyFilter) newest() *bloom.BloomFilter {
	if k.n >= k.plan {
		k.grow(2 * k.plan)
	}
	k.n++
	return k.fs[len(k.fs)-1]
}

func (k *keyFilter) add(key []byte) { k.newest().Add(key) }

func (k *keyFilter) addString(key string) { k.newest().AddString(key) }

// has reports whether key may be the key of a row; false is certain.
func (k *keyFilter) has(key []byte) bool {
	for i := len(k.fs) - 1; i >= 0; i-- {
		if k.fs[i].Test(key) {
			return true
		}
	}
	return false
}

// bytes returns the memory of its bits.
func (k *keyFilter) bytes() uint64 {
	var n uint64
	for _, f := range k.fs {
		n += uint64(f.Cap()) / 8
	}
	return n
}

// buildKeys builds the key filter, sized for twice the table's rows (at
// least Options.CacheRows: it is built when they fill the cache), from
// the stored rows' keys and the cached rows. The caller holds writeMu (or
// is Open, before the storer starts), so the cache changes only by a store
// settling, which takes writeMu too: a
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
