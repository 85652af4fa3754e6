package writer

import (
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// combiner pre-aggregates the rows of each key between two flushes, so the
// table and its changelog grow with distinct keys, not with records. Values
// are kept as partial aggregates, one agg.Accumulator per key and column (a
// sketch stays decoded until the drain), and written in aggmerge.Partial
// mode. Keys and accumulators live in flat slices reused across flushes,
// found through a keyIndex over the keys; only a sketch seen twice for a key
// allocates (its decoded form). A combiner of partials (the
// sink's Config.Partials) folds its values as they are, without
// agg.Func.Partial.
type combiner struct {
	partials bool
	funcs    []*agg.Func
	types    []agg.Type
	index    keyIndex
	keys     []byte            // encoded keys, back to back
	ends     []int             // end of each slot's key in keys
	accs     []agg.Accumulator // len(funcs) per slot
	out      []agg.Value       // one slot's values, at drain
}

func newCombiner(t *aggmerge.Table, cols []int, partials bool) *combiner {
	c := &combiner{partials: partials, index: newKeyIndex()}
	for _, i := range cols {
		c.funcs = append(c.funcs, t.Func(i))
		c.types = append(c.types, t.Schema().Values[i].Type)
	}
	return c
}

// len returns the number of keys waiting.
func (c *combiner) len() int { return len(c.ends) }

// key returns the encoded key of a slot.
func (c *combiner) key(slot int) []byte {
	start := 0
	if slot > 0 {
		start = c.ends[slot-1]
	}
	return c.keys[start:c.ends[slot]]
}

// add folds one row's values into the partials of its key, encoded by the
// table's AppendKey.
func (c *combiner) add(key []byte, vals []agg.Value) error {
	if len(vals) != len(c.funcs) {
		return errValues(len(vals), len(c.funcs))
	}
	slot, hash := c.index.find(key, c.key)
	if slot < 0 {
		slot = len(c.ends)
		c.keys = append(c.keys, key...)
		c.ends = append(c.ends, len(c.keys))
		c.index.insert(hash, slot, c.key)
		for _, f := range c.funcs {
			c.accs = append(c.accs, f.NewAccumulator())
		}
	}
	accs := c.accs[slot*len(c.funcs) : (slot+1)*len(c.funcs)]
	for j, v := range vals {
		in, err := agg.Conform(c.types[j], v)
		if err != nil {
			return err
		}
		if !c.partials {
			in = c.funcs[j].Partial(in)
		}
		if err := accs[j].Add(in); err != nil {
			return err
		}
	}
	return nil
}

// drain moves every waiting key into b, in the order keys were first seen,
// and empties the combiner.
func (c *combiner) drain(b *aggmerge.Batch) error {
	w, start := len(c.funcs), 0
	for slot, end := range c.ends {
		c.out = c.out[:0]
		accs := c.accs[slot*w : (slot+1)*w]
		for i := range accs {
			v, err := accs[i].Value()
			if err != nil {
				return err
			}
			c.out = append(c.out, v)
		}
		if err := b.UpsertEncoded(aggmerge.Partial, c.keys[start:end], c.out); err != nil {
			return err
		}
		start = end
	}
	c.index.reset()
	clear(c.accs) // drop references held by values and sketches
	clear(c.out)
	c.keys, c.ends, c.accs = c.keys[:0], c.ends[:0], c.accs[:0]
	return nil
}
