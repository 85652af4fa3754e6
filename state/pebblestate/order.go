package pebblestate

import (
	"bytes"
	"cmp"
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
}

// order returns the indexes of ops sorted by key; ops of the same key keep
// their order, so the last one still wins. The slice is valid until the next
// call. State keys start with their 2-byte key group: a counting sort by the
// first two bytes splits the batch into small runs that are sorted on their
// own.
func (o *orderer) order(ops []state.WriteOp) []int32 {
	if len(ops) == 0 {
		return nil
	}
	lo, hi := 1<<16, 0
	for _, op := range ops {
		b := bucket(op.Key)
		lo, hi = min(lo, b), max(hi, b)
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
	o.idx = slices.Grow(o.idx[:0], len(ops))[:len(ops)]
	for i, op := range ops {
		b := bucket(op.Key) - lo
		o.idx[o.counts[b]] = int32(i)
		o.counts[b]++
	}
	// counts[b] is now the end of bucket b.
	start := int32(0)
	for _, end := range o.counts[:len(o.counts)-1] {
		slices.SortFunc(o.idx[start:end], func(x, y int32) int {
			if c := bytes.Compare(ops[x].Key, ops[y].Key); c != 0 {
				return c
			}
			return cmp.Compare(x, y)
		})
		start = end
	}
	return o.idx
}

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
