package aggmerge

// rowCache is the write-through cache of encoded rows, keyed by encoded
// primary key. Only the writer fills it (after its commit), so it never
// holds a row older than pebble's. complete means every row of the table is
// in the cache, so a miss is an absent row and needs no pebble read; the
// first eviction clears it.
type rowCache struct {
	max      int
	complete bool
	rows     map[string][]byte
}

func newRowCache(max int, complete bool) rowCache {
	return rowCache{max: max, complete: complete, rows: make(map[string][]byte)}
}

// get returns the cached row of key; known reports whether the answer is
// authoritative (a hit, or a miss in a complete cache).
func (c *rowCache) get(key []byte) (row []byte, known bool) {
	row, ok := c.rows[string(key)]
	return row, ok || c.complete
}

// put caches a row, evicting arbitrary rows (Go's map order) when full.
func (c *rowCache) put(key string, row []byte) {
	c.rows[key] = row
	if len(c.rows) <= c.max {
		return
	}
	c.complete = false
	target := c.max - c.max/16
	for k := range c.rows {
		if len(c.rows) <= target {
			break
		}
		delete(c.rows, k)
	}
}

func (c *rowCache) del(key string) { delete(c.rows, key) }
