package writer

import (
	"bytes"
	"hash/maphash"
)

// keyIndex finds the combiner's slot of an encoded key without allocating:
// an open-addressing table (linear probing, at most half full) of cells
// that each pack the upper half of the key's hash and its slot number + 1
// (0 is an empty cell), over the keys the combiner keeps back to back. A
// map[string]int allocated a string per key first seen in a flush, which
// with mostly distinct keys was nearly every record, and its entries held
// pointers for the garbage collector to scan; the cells hold none.
type keyIndex struct {
	seed  maphash.Seed
	cells []uint64 // len a power of two, or nil
	n     int      // keys held
}

func newKeyIndex() keyIndex { return keyIndex{seed: maphash.MakeSeed()} }

// find returns the slot of key, or -1. keyOf returns the key of a slot.
func (x *keyIndex) find(key []byte, keyOf func(slot int) []byte) (slot int, hash uint64) {
	hash = maphash.Bytes(x.seed, key)
	if x.cells == nil {
		return -1, hash
	}
	mask := uint64(len(x.cells) - 1)
	for i := hash & mask; ; i = (i + 1) & mask {
		c := x.cells[i]
		if c == 0 {
			return -1, hash
		}
		if c>>32 == hash>>32 && bytes.Equal(keyOf(int(uint32(c))-1), key) {
			return int(uint32(c)) - 1, hash
		}
	}
}

// insert records slot for a key of the given hash (from find, which did not
// find it); keyOf re-hashes the keys held when the table grows.
func (x *keyIndex) insert(hash uint64, slot int, keyOf func(slot int) []byte) {
	if 2*(x.n+1) > len(x.cells) {
		x.grow(keyOf)
	}
	x.put(hash, slot)
	x.n++
}

func (x *keyIndex) put(hash uint64, slot int) {
	mask := uint64(len(x.cells) - 1)
	i := hash & mask
	for x.cells[i] != 0 {
		i = (i + 1) & mask
	}
	x.cells[i] = hash>>32<<32 | uint64(uint32(slot+1))
}

func (x *keyIndex) grow(keyOf func(slot int) []byte) {
	x.cells = make([]uint64, max(2*len(x.cells), 1024))
	for slot := range x.n {
		x.put(maphash.Bytes(x.seed, keyOf(slot)), slot)
	}
}

// reset empties the index and keeps its cells.
func (x *keyIndex) reset() {
	clear(x.cells)
	x.n = 0
}
