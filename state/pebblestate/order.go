package pebblestate

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/ebbflow/ebbflow/state"
)

// orderer computes the key order of a batch's operations, reusing its
// buffers from one batch to the next. A memtable inserts keys in order next
// to the previous one, instead of searching its skiplist from the top for
// each, and a checkpoint writes every dirty key of the state at once.
type orderer struct {
	idx    []int32
	counts []int32
	sorted []abbrev
}

// abbrev is an op's index with 8 bytes of its key: those after the group and
// the prefix that every key of the batch shares next (state name, leading
// zeros of the keys), which mostly decide the order alone.
type abbrev struct {
	key uint64
	i   int32
}

// order returns the indexes of ops sorted by key; ops of the same key keep
// their order, so the last one still wins. The slice is valid until the next
// call. State keys start with their 2-byte key group: a counting sort by the
// first two bytes splits the batch into runs of one group, and each run is
// sorted on abbreviated keys, comparing whole keys only on a tie. Only the
// sort of a run jumps around memory; the passes over ops read it in order.
func (o *orderer) order(ops []state.WriteOp) []int32 {
	if len(ops) == 0 {
		return nil
	}
	lo, hi := 1<<16, 0
	first := afterBucket(ops[0].Key)
	shared := len(first)
	for _, op := range ops {
		b := bucket(op.Key)
		lo, hi = min(lo, b), max(hi, b)
		shared = commonPrefix(first[:shared], afterBucket(op.Key))
	}
	// counts[b-lo+1] counts bucket b; the prefix sums turn it into the start
	// of bucket b+1.
	o.counts = slices.Grow(o.counts[:0], hi-lo+2)[:hi-lo+2]
	clear(o.counts)
	for _, op := range ops {
		o.counts[bucket(op.Key)-lo+1]++
	}
	for i := 1; i < len(o.counts); i++ {
		o.counts[i] += o.counts[i-1]
	}
	o.sorted = slices.Grow(o.sorted[:0], len(ops))[:len(ops)]
	for i, op := range ops {
		var buf [8]byte
		copy(buf[:], afterBucket(op.Key)[shared:])
		b := bucket(op.Key) - lo
		o.sorted[o.counts[b]] = abbrev{key: binary.BigEndian.Uint64(buf[:]), i: int32(i)}
		o.counts[b]++
	}
	// counts[b] is now the end of bucket b.
	start := int32(0)
	for _, end := range o.counts[:len(o.counts)-1] {
		slices.SortFunc(o.sorted[start:end], func(x, y abbrev) int {
			if c := cmp.Compare(x.key, y.key); c != 0 {
				return c
			}
			if c := bytes.Compare(ops[x.i].Key, ops[y.i].Key); c != 0 {
				return c
			}
			return cmp.Compare(x.i, y.i)
		})
		start = end
	}
	o.idx = slices.Grow(o.idx[:0], len(ops))[:len(ops)]
	for j, a := range o.sorted {
		o.idx[j] = a.i
	}
	return o.idx
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// afterBucket is what follows the bucket bytes of key.
func afterBucket(key []byte) []byte { return key[min(2, len(key)):] }

// bucket is the first two bytes of key, big-endian, missing bytes as zero:
// keys in a lower bucket sort before those in a higher one.
func bucket(key []byte) int {
	switch len(key) {
	case 0:
		return 0
	case 1:
		return int(key[0]) << 8
	}
	return int(key[0])<<8 | int(key[1])
}
