package aggmerge

// rowCache is the write-back cache of encoded rows, keyed by encoded
// primary key. Only the writer changes it (under writeMu, and under mu for
// the readers' sake), so the writer may read it without mu. It never holds
// a row older than pebble's, and holds every dirty row (one changed since
// it was last stored) until it is stored (rows.go). complete means every row
// of the table is in the cache, so a miss is an absent row and needs no
// pebble read; the first eviction clears it. A bucket that a Loader wrote
// is loaded: its rows went to pebble without entries, so a miss there reads
// pebble even in a complete cache, until the table is reopened. keys, the
// key filter (keys.go), if not nil, holds every key of a row: a miss of a
// key it has not is an absent row too. It is kept once the cache is not
// complete.
//
// Entries are pointers so that one map lookup per write serves both the
// batch's view of the row (pending) and the committed row.
type rowCache struct {
	max      int
	complete bool
	loaded   []bool // by bucket
	rows     map[string]*cachedRow
	keys     *keyFilter
}

// cachedRow is one key's cache entry. row is the committed encoded row, nil
// when the row is known to be absent. pending is the row as the Apply of
// generation gen has left it so far; it is only read by that Apply. dirty
// says row is not stored yet (the table's dirty list holds the entry);
// pinned that a store is writing it, so it must not be evicted yet. An
// entry of an absent row stays until it is stored (in a complete cache) or
// evicted.
type cachedRow struct {
	key     string
	bucket  uint32
	dirty   bool
	pinned  bool
	row     []byte
	pending []byte
	gen     uint64
}

func newRowCache(max int, complete bool, buckets int) rowCache {
	return rowCache{max: max, complete: complete, loaded: make([]bool, buckets), rows: make(map[string]*cachedRow)}
}

// completeFor reports whether a miss of a key of bucket is an absent row.
func (c *rowCache) completeFor(bucket uint32) bool {
	return c.complete && !c.loaded[bucket]
}

// absent reports whether a key of bucket that the cache does not hold is
// of no row: the cache is complete for the bucket, or the key filter has
// not the key.
func (c *rowCache) absent(key []byte, bucket uint32) bool {
	return c.completeFor(bucket) || (c.keys != nil && !c.keys.has(key))
}

// needKeys reports whether the writer should build the key filter before
// it reads a miss from pebble: the cache is not complete and it has none.
func (c *rowCache) needKeys() bool {
	return !c.complete && c.keys == nil
}

// get returns the cached row of key, of bucket; known reports whether the
// answer is authoritative (a hit, or a miss of an absent row).
func (c *rowCache) get(key []byte, bucket uint32) (row []byte, known bool) {
	if e, ok := c.rows[string(key)]; ok {
		return e.row, true
	}
	return nil, c.absent(key, bucket)
}

// add caches a new entry, evicting arbitrary stored rows (Go's map order)
// when full, except e and the entries of the running Apply (generation gen).
// With too few stored rows to evict, the cache grows until the next store.
func (c *rowCache) add(e *cachedRow, gen uint64) {
	c.rows[e.key] = e
	if len(c.rows) <= c.max {
		return
	}
	c.complete = false
	target := c.max - c.max/16
	for k, old := range c.rows {
		if len(c.rows) <= target {
			break
		}
		if old != e && old.gen != gen && !old.dirty && !old.pinned {
			delete(c.rows, k)
		}
	}
}
