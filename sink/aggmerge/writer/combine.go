package writer

import (
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// combiner pre-aggregates the rows of each key between two flushes, so the
// table and its changelog grow with distinct keys, not with records. Values
// are kept as partial aggregates (agg.Func.Partial, Combine) and written in
// aggmerge.Partial mode. Keys and values live in flat slices reused across
// flushes; only a key first seen in a flush allocates (its map entry).
type combiner struct {
	t      *aggmerge.Table
	funcs  []*agg.Func
	types  []agg.Type
	index  map[string]int
	keys   []byte      // encoded keys, back to back
	ends   []int       // end of each slot's key in keys
	vals   []agg.Value // len(funcs) per slot
	keyBuf []byte
}

func newCombiner(t *aggmerge.Table, cols []int) *combiner {
	c := &combiner{t: t, index: map[string]int{}}
	for _, i := range cols {
		c.funcs = append(c.funcs, t.Func(i))
		c.types = append(c.types, t.Schema().Values[i].Type)
	}
	return c
}

// len returns the number of keys waiting.
func (c *combiner) len() int { return len(c.index) }

// add folds one row's values into its key's partials.
func (c *combiner) add(key, vals []agg.Value) error {
	var err error
	if c.keyBuf, err = c.t.AppendKey(c.keyBuf[:0], key); err != nil {
		return err
	}
	if len(vals) != len(c.funcs) {
		return errValues(len(vals), len(c.funcs))
	}
	slot, ok := c.index[string(c.keyBuf)]
	if !ok {
		slot = len(c.index)
		c.index[string(c.keyBuf)] = slot
		c.keys = append(c.keys, c.keyBuf...)
		c.ends = append(c.ends, len(c.keys))
	}
	for j, v := range vals {
		in, err := agg.Conform(c.types[j], v)
		if err != nil {
			return err
		}
		p := c.funcs[j].Partial(in)
		if ok {
			if p, err = c.funcs[j].Combine(c.vals[slot*len(c.funcs)+j], p); err != nil {
				return err
			}
			c.vals[slot*len(c.funcs)+j] = p
		} else {
			c.vals = append(c.vals, p)
		}
	}
	return nil
}

// drain moves every waiting key into b, in the order keys were first seen,
// and empties the combiner.
func (c *combiner) drain(b *aggmerge.Batch) error {
	w, start := len(c.funcs), 0
	for slot, end := range c.ends {
		if err := b.UpsertEncoded(aggmerge.Partial, c.keys[start:end], c.vals[slot*w:(slot+1)*w]); err != nil {
			return err
		}
		start = end
	}
	clear(c.index)
	clear(c.vals) // drop references held by values
	c.keys, c.ends, c.vals = c.keys[:0], c.ends[:0], c.vals[:0]
	return nil
}
