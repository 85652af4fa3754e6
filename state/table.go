package state

import (
	"fmt"

	"github.com/ebbflow/ebbflow/internal/invariants"
)

// entry is a cached value: present false caches "no value" (a miss or a
// delete), so a later Put or Get of the key does not read the backend again.
// The entry is dirty while gen equals its table's gen: a flush makes every
// entry clean at once by moving the table to the next generation.
type entry[V any] struct {
	v       V
	present bool
	gen     uint32
}

// table is the cache of a state holding one value per key; Value, List,
// Reducing and Aggregating are built on it. Backend key: the state prefix
// and the encoded key.
type table[K comparable, V any] struct {
	kd    *Keyed
	name  string
	kc    Codec[K]
	vc    Codec[V]
	m     map[K]entry[V]
	gen   uint32 // generation of dirty entries, never 0
	dirty []K    // keys whose entry is dirty, each once
	// complete: the cache holds every value of the state (loadAll put them
	// there and none was evicted since), so a key it lacks has none and get
	// answers it without reading the backend. The cache then keeps no
	// absent entries once they are flushed (markClean).
	complete bool
}

func newTable[K comparable, V any](kd *Keyed, name string, kc Codec[K], vc Codec[V]) *table[K, V] {
	t := &table[K, V]{kd: kd, name: name, kc: kc, vc: vc, m: map[K]entry[V]{}, gen: 1}
	kd.register(name, t)
	return t
}

func (t *table[K, V]) get(k K) (V, bool, error) {
	if e, ok := t.m[k]; ok {
		return e.v, e.present, nil
	}
	if t.complete {
		var zero V
		return zero, false, nil
	}
	return t.load(k)
}

func (t *table[K, V]) load(k K) (v V, ok bool, err error) {
	enc, g, err := encodeKey(t.kd, t.kc, k)
	if err != nil {
		return v, false, fmt.Errorf("state %q: %w", t.name, err)
	}
	// Build the backend key after the encoded key in scratch.
	t.kd.scratch = AppendStatePrefix(t.kd.scratch, g, t.name)
	t.kd.scratch = append(t.kd.scratch, enc...)
	key := t.kd.scratch[len(enc):]
	raw, ok, err := t.kd.backend.Get(key)
	if err != nil {
		return v, false, fmt.Errorf("state %q: get %v: %w", t.name, k, err)
	}
	if ok {
		if v, err = t.vc.Decode(raw); err != nil {
			return v, false, fmt.Errorf("state %q: value of %v: %w", t.name, k, err)
		}
	}
	if _, err := t.kd.reserve(1); err != nil {
		return v, false, err
	}
	t.m[k] = entry[V]{v: v, present: ok}
	return v, ok, nil
}

// set caches v (or its absence) as the dirty value of k.
func (t *table[K, V]) set(k K, v V, present bool) error {
	e, ok := t.m[k]
	if !ok {
		if _, err := t.kd.reserve(1); err != nil {
			return err
		}
	}
	e.v, e.present = v, present
	if e.gen != t.gen {
		e.gen = t.gen
		t.dirty = append(t.dirty, k)
	}
	t.m[k] = e
	return nil
}

func (t *table[K, V]) appendDirty(kd *Keyed) error {
	if invariants.Enabled {
		t.checkDirty()
	}
	if 4*len(t.dirty) < len(t.m) {
		for _, k := range t.dirty {
			if err := t.appendEntry(kd, k, t.m[k]); err != nil {
				return err
			}
		}
		return nil
	}
	// A quarter or more of the entries are dirty: a pass over the map reads
	// its memory in order, where a lookup per dirty key jumps around it.
	for k, e := range t.m {
		if e.gen != t.gen {
			continue
		}
		if err := t.appendEntry(kd, k, e); err != nil {
			return err
		}
	}
	return nil
}

// checkDirty panics unless the dirty list names every dirty entry, each
// once, and nothing else: appendDirty may write only the listed keys, so a
// key missing from the list would be a write lost without a word. It costs
// a pass over the whole cache per flush: invariants builds only.
func (t *table[K, V]) checkDirty() {
	listed := make(map[K]bool, len(t.dirty))
	for _, k := range t.dirty {
		if listed[k] {
			panic(fmt.Sprintf("state %q: key %v listed dirty twice", t.name, k))
		}
		listed[k] = true
		if e, ok := t.m[k]; !ok || e.gen != t.gen {
			panic(fmt.Sprintf("state %q: key %v listed dirty, but its cache entry is not (cached %v)", t.name, k, ok))
		}
	}
	for k, e := range t.m {
		if e.gen == t.gen && !listed[k] {
			panic(fmt.Sprintf("state %q: key %v is dirty but not listed: its write would be lost", t.name, k))
		}
	}
}

// appendEntry appends the write of the dirty entry e of k.
func (t *table[K, V]) appendEntry(kd *Keyed, k K, e entry[V]) error {
	enc, g, err := encodeKey(kd, t.kc, k)
	if err != nil {
		return fmt.Errorf("state %q: %w", t.name, err)
	}
	var v []byte
	if e.present {
		start := len(kd.buf)
		kd.buf = t.vc.Append(kd.buf, e.v)
		v = kd.buf[start:len(kd.buf):len(kd.buf)]
	}
	kd.appendOp(g, t.name, enc, e.present, v)
	return nil
}

func (t *table[K, V]) markClean() {
	t.gen++
	if t.gen == 0 {
		// After 2^32 flushes: entries of generation 0 are clean anyway, and
		// every older generation, dirty or not, has been flushed.
		for k, e := range t.m {
			e.gen = 0
			t.m[k] = e
		}
		t.gen = 1
	}
	if t.complete {
		// A flushed absent entry tells nothing a complete cache does not.
		// The batch holds its delete: the backend behind it is never read.
		for _, k := range t.dirty {
			if !t.m[k].present {
				delete(t.m, k)
				t.kd.entries--
			}
		}
	}
	clear(t.dirty)
	t.dirty = t.dirty[:0]
}

func (t *table[K, V]) evict(n int) int {
	freed := 0
	for k, e := range t.m {
		if freed == n {
			break
		}
		if e.gen != t.gen {
			delete(t.m, k)
			freed++
			t.complete = t.complete && !e.present
		}
	}
	return freed
}

// loadAll is scan that also caches every value it reads, as a clean
// entry, while the cache has room (it never evicts during the scan); if
// all of them fit, the cache is complete from then on.
func (t *table[K, V]) loadAll(fn func(k K, v V) error) error {
	complete := true
	err := t.scan(func(k K, v V) error {
		if _, cached := t.m[k]; !cached { // else cached after the flush: the same value
			if t.kd.entries < t.kd.maxEntries {
				t.m[k] = entry[V]{v: v, present: true}
				t.kd.entries++
			} else {
				complete = false
			}
		}
		return fn(k, v)
	})
	t.complete = err == nil && complete
	return err
}

// scan writes the cache to the backend, then calls fn for every key of the
// state in the subtask's key groups, in backend order (by group, then by
// encoded key), decoded. fn must not change the state.
func (t *table[K, V]) scan(fn func(k K, v V) error) error {
	if err := t.kd.Flush(); err != nil {
		return err
	}
	var prefix []byte
	for g := t.kd.groups.Start; g < t.kd.groups.End; g++ {
		prefix = AppendStatePrefix(prefix[:0], g, t.name)
		err := t.kd.backend.Scan(prefix, func(bk, bv []byte) error {
			k, err := t.kc.Decode(bk[len(prefix):])
			if err != nil {
				return fmt.Errorf("state %q: key %x: %w", t.name, bk, err)
			}
			v, err := t.vc.Decode(bv)
			if err != nil {
				return fmt.Errorf("state %q: value of %v: %w", t.name, k, err)
			}
			return fn(k, v)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
