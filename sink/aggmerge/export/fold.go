package export

import (
	"slices"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// fold gathers the committed changes of one range of a bucket's log into
// one change per key: from the key's image before its first change in the
// range to its image after the last. The writers write a key once per
// flush, several times per checkpoint; a consumer of the committed
// changelog only ever sees whole ranges (a transaction holds whole ranges),
// so the states inside one are never visible and need not be published.
// A deletion is kept apart: a row deleted within the range is published as
// its last image before the deletion, then the deletion, so that a row
// that lived within one range (a window's final result soon expired by
// retention, a session merged into another) is still seen.
// One fold is reused from range to range: its memory is that of the
// largest range, bounded by the export budget.
type fold struct {
	index   map[string]int // encoded key → its open fold in changes
	changes []folded       // in the order of each fold's first change
	order   []*folded      // changes sorted by offset, for emitting
	arena   []agg.Value    // the keys and images, copied
	bytes   []byte         // the encoded after-images, copied
	n       int            // values per image
	decode  func(enc []byte, dst []agg.Value) ([]agg.Value, error)
}

type folded struct {
	change
	afterBuf []agg.Value // where after is copied (after may be nil)
	encoded  []byte      // the after-image, encoded, when moveOn set it last
}

func newFold(t *aggmerge.Table) *fold {
	return &fold{index: map[string]int{}, n: len(t.Schema().Values), decode: t.DecodeImage}
}

func (f *fold) reset() {
	clear(f.index)
	f.changes, f.order, f.arena, f.bytes = f.changes[:0], f.order[:0], f.arena[:0], f.bytes[:0]
}

// open reports whether the key encoded as k has an open fold.
func (f *fold) open(k []byte) bool {
	_, ok := f.index[string(k)]
	return ok
}

// moveOn moves the open fold of the key encoded as k on to the encoded
// after-image enc, of a change at offset: an update, whose before-image is
// the fold's after-image. It is decoded only if it is still the fold's
// last when the fold is emitted.
func (f *fold) moveOn(k, enc []byte, offset, checkpoint uint64, undo bool) {
	p := &f.changes[f.index[string(k)]]
	p.offset, p.checkpoint, p.undo = offset, checkpoint, undo
	if cap(p.encoded) < len(enc) {
		if cap(f.bytes)-len(f.bytes) < 2*len(enc) {
			f.bytes = make([]byte, 0, max(2*cap(f.bytes), 1<<16, 2*len(enc)))
		}
		p.encoded = f.bytes[len(f.bytes) : len(f.bytes) : len(f.bytes)+2*len(enc)]
		f.bytes = f.bytes[:len(f.bytes)+2*len(enc)]
	}
	p.encoded = append(p.encoded[:0], enc...)
}

func (f *fold) len() int { return len(f.changes) }

// copyOf returns a copy of vals in the arena, with room for at least room
// values.
func (f *fold) copyOf(vals []agg.Value, room int) []agg.Value {
	room = max(room, len(vals))
	if cap(f.arena)-len(f.arena) < room {
		// The old arena stays referenced by the copies already made.
		f.arena = make([]agg.Value, 0, max(2*cap(f.arena), 1024*room))
	}
	s := f.arena[len(f.arena) : len(f.arena)+len(vals) : len(f.arena)+room]
	f.arena = f.arena[:len(f.arena)+room]
	copy(s, vals)
	return s
}

// add folds ch, the change of the key encoded as k, into the range:
// copied, since ch's slices are valid only during the call.
func (f *fold) add(k []byte, ch *change) {
	i, open := f.index[string(k)]
	switch {
	case ch.after == nil: // a deletion ends the key's fold and stays apart
		if open {
			delete(f.index, string(k))
		}
		p := folded{change: *ch}
		p.key, p.before = f.copyOf(ch.key, 0), f.copyOf(ch.before, 0)
		f.changes = append(f.changes, p)
	case open:
		p := &f.changes[i]
		p.offset, p.checkpoint, p.undo = ch.offset, ch.checkpoint, ch.undo
		p.encoded = p.encoded[:0]
		if cap(p.afterBuf) < len(ch.after) {
			p.afterBuf = f.copyOf(ch.after, f.n)
		}
		p.after = append(p.afterBuf[:0], ch.after...)
	default:
		f.index[string(k)] = len(f.changes)
		p := folded{change: *ch}
		p.key = f.copyOf(ch.key, 0)
		if ch.before != nil {
			p.before = f.copyOf(ch.before, 0)
		}
		p.afterBuf = f.copyOf(ch.after, f.n)
		p.after = append(p.afterBuf[:0], ch.after...)
		f.changes = append(f.changes, p)
	}
}

// emit passes the range's changes to emit in log order, each at the offset
// of the last change folded into it, leaving out the folds that cancel out
// (a row's values set and set back).
// A restart reads on after the offset of the last record: when keys that
// cancelled out have later changes than it, the last record carries the
// latest of those offsets instead of its own, so that a restart does not
// read their last changes alone. Every record carries resume(the last
// record's offset), the restart point. Then it resets f.
func (f *fold) emit(resume func(last uint64) uint64, emit func(*change) error) error {
	defer f.reset()
	var cancelled uint64 // past the last change of a fold that cancelled out
	for i := range f.changes {
		p := &f.changes[i]
		if len(p.encoded) > 0 {
			after, err := f.decode(p.encoded, p.afterBuf)
			if err != nil {
				return err
			}
			p.after, p.afterBuf = after, after
		}
		if sameRow(p.before, p.after) { // never a deletion: its after is nil, its before not
			cancelled = max(cancelled, p.offset+1)
			continue
		}
		p.op = opOf(p.before, p.after)
		f.order = append(f.order, p)
	}
	slices.SortFunc(f.order, func(a, b *folded) int {
		switch {
		case a.offset < b.offset:
			return -1
		case a.offset > b.offset:
			return 1
		}
		return 0
	})
	n := len(f.order)
	if n == 0 {
		return nil
	}
	if cancelled > f.order[n-1].offset+1 {
		f.order[n-1].offset = cancelled - 1
	}
	r := resume(f.order[n-1].offset)
	for _, p := range f.order {
		p.resume = r
		if err := emit(&p.change); err != nil {
			return err
		}
	}
	return nil
}
