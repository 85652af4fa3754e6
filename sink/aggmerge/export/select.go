package export

import (
	"errors"
	"slices"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Mode says which log entries are exported.
type Mode string

// The modes.
const (
	// Committed exports only entries covered by a commit marker of their
	// writer, never a rolled-back entry (see the package doc).
	Committed Mode = "committed"
	// Uncommitted exports every entry as it is written, undo entries
	// included.
	Uncommitted Mode = "uncommitted"
)

// cursor is the export position of one bucket.
type cursor struct {
	bucket int
	// done: every entry below it was exported or passed over for good.
	done uint64
	// resume: a scan that rebuilds the selection state starts here (≤ done).
	resume uint64
	// held: where an exporter restarted now would read from, per the last
	// committed record of the partition (≤ resume): the log is held from
	// here, since entries passed over after that record (markers, rolled
	// back or invisible ones) are read again by a restart.
	held uint64
	// Committed mode: the markers at offsets in [resume, scanned), in order.
	markers []marker
	scanned uint64
	// blocked is the writer group of the first undecided entry ("" if
	// none) and blockedBy its writer id.
	blocked, blockedBy string
	// Committed mode, for versions: the offset of the last marker scanned
	// (if marked), and per writer group the checkpoint of its last marker
	// scanned, since the exporter started.
	marked     bool
	lastMarker uint64
	lastOf     map[string]lastMarker
}

// lastMarker is the last marker of a writer group in a bucket.
type lastMarker struct {
	writer     aggmerge.Writer // the subtask that wrote it, and its epoch
	rollback   bool            // a rollback marker (else a commit marker)
	checkpoint uint64
}

type marker struct {
	off   uint64
	group string
	m     aggmerge.Marker
}

// group is the writer group of a writer id: the exactly-once writer's
// subtasks write as "<job>/<sink>#<subtask>" and any subtask of the sink
// may commit or roll back a bucket (ownership moves on rescale), so entries
// and markers are matched by "<job>/<sink>". An id without '#' is its own
// group.
func group(writer string) string {
	g, _ := base.GroupOf(writer)
	return g
}

// decision is the fate of one entry in committed mode.
type decision uint8

const (
	undecided decision = iota
	exported           // covered by a commit marker, or its writer is not registered
	discarded          // inside a rolled-back range of its writer group
	undoOf             // an undo entry of a rollback
)

// decide finds the first marker of e's group after it that settles it.
// markers are those after e's offset onward (sorted by offset).
func decide(markers []marker, e *aggmerge.Entry, g string, registered map[string]bool) (decision, marker) {
	i, _ := slices.BinarySearchFunc(markers, e.Offset+1, func(m marker, off uint64) int {
		switch {
		case m.off < off:
			return -1
		case m.off > off:
			return 1
		}
		return 0
	})
	for _, m := range markers[i:] {
		if m.group != g {
			continue
		}
		switch m.m.Kind {
		case aggmerge.MarkerCommit:
			if m.m.To > e.Offset {
				return exported, m
			}
		case aggmerge.MarkerRollback:
			if m.m.From <= e.Offset && e.Offset < m.m.To {
				return discarded, m
			}
			if e.Undo {
				return undoOf, m
			}
		}
	}
	if !registered[e.Writer.ID] {
		return exported, marker{}
	}
	return undecided, marker{}
}

// masks hide, in the images of other entries, the values of rolled-back
// writes until the rollback marker: key (encoded) → mask.
type masks map[string]*mask

type mask struct {
	from    uint64 // offset of the first rolled-back entry that made it
	existed bool   // the row existed before the first rolled-back entry
	cols    map[int]maskedCol
}

// maskedCol is a column a group's rolled-back writes changed: it is masked
// until that group's rollback marker, not another group's, so that the
// group's later writes show once it has rolled back.
type maskedCol struct {
	v     agg.Value // the value before the first rolled-back change
	group string
	until uint64 // offset of the rollback marker it waits for
}

// add records the columns a discarded entry of group g changed.
func (ms masks) add(k string, e *aggmerge.Entry, g string, rollback uint64) {
	m := ms[k]
	if m == nil {
		m = &mask{from: e.Offset, existed: e.Before != nil, cols: map[int]maskedCol{}}
		ms[k] = m
	}
	n := max(len(e.Before), len(e.After))
	for c := range n {
		b, a := at(e.Before, c), at(e.After, c)
		if sameVisible(b, a) {
			continue
		}
		if mc, ok := m.cols[c]; ok {
			mc.until = max(mc.until, rollback)
			m.cols[c] = mc
		} else {
			m.cols[c] = maskedCol{v: b, group: g, until: rollback}
		}
	}
	if len(m.cols) == 0 {
		delete(ms, k)
	}
}

// expire unmasks the columns that waited for the marker at off, drops the
// masks left empty, and returns the lowest offset the masks it changed
// were made from (off+1 if none).
func (ms masks) expire(off uint64) uint64 {
	from := off + 1
	for k, m := range ms {
		for c, mc := range m.cols {
			if mc.until <= off {
				from = min(from, m.from)
				delete(m.cols, c)
			}
		}
		if len(m.cols) == 0 {
			delete(ms, k)
		}
	}
	return from
}

// from is the lowest offset a rescan must start at to rebuild ms.
func (ms masks) from(done uint64) uint64 {
	for _, m := range ms {
		done = min(done, m.from)
	}
	return done
}

// project returns img (nil: no row) as the committed view shows it: masked
// columns at their value before the rolled-back writes, except those of
// group keep (an undo entry's own after-image is the truth). Known limit:
// a projected row whose columns all show null is shown as a row when the
// row existed before the mask's first rolled-back write, else as none,
// which is not always what the committed view holds.
func (m *mask) project(img []agg.Value, n int, keep string) []agg.Value {
	if m == nil {
		return img
	}
	out := make([]agg.Value, n)
	copy(out, img)
	for c, mc := range m.cols {
		if mc.group != keep {
			out[c] = mc.v
		}
	}
	if anyPresent(out) || (img != nil && m.existed) {
		return out
	}
	return nil
}

func at(img []agg.Value, c int) agg.Value {
	if c < len(img) {
		return img[c]
	}
	return agg.Value{}
}

// sameVisible compares values as the JSON formats show them: absent and
// null alike.
func sameVisible(a, b agg.Value) bool {
	if a.IsNull() || b.IsNull() {
		return a.IsNull() && b.IsNull()
	}
	return a.Equal(b)
}

func sameRow(a, b []agg.Value) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameVisible(a[i], b[i]) {
			return false
		}
	}
	return true
}

func anyPresent(vals []agg.Value) bool {
	return slices.ContainsFunc(vals, func(v agg.Value) bool { return !v.IsNull() })
}

// expiry is an entry (a rollback marker, an undo entry) that unmasked
// columns, and the lowest offset their masks were made from.
type expiry struct{ at, from uint64 }

// opOf is the change op of a pair of images.
func opOf(before, after []agg.Value) aggmerge.ChangeOp {
	switch {
	case before == nil:
		return aggmerge.Insert
	case after == nil:
		return aggmerge.Delete
	}
	return aggmerge.UpdateAfter
}

var errStop = errors.New("export: stop reading")

// selectUncommitted passes to emit the changes of cursor c's bucket from
// c.done up to end, at most budget, and advances c. The changes' slices
// are valid only during the call.
func selectUncommitted(t *aggmerge.Table, c *cursor, end uint64, budget int, emit func(*change) error) error {
	n := 0
	var ch change
	err := t.ReadLogWith(c.bucket, c.done, aggmerge.LogRead{Reuse: true}, func(e *aggmerge.Entry) error {
		if e.Offset >= end || n >= budget {
			return errStop
		}
		c.done = e.Offset + 1
		if e.Op == aggmerge.MarkerEntry || e.Op == aggmerge.UpdateBefore {
			return nil
		}
		n++
		ch = change{op: e.Op, offset: e.Offset, key: e.Key, before: e.Before, after: e.After, undo: e.Undo, resume: c.done}
		return emit(&ch)
	})
	c.resume = c.done
	if errors.Is(err, errStop) {
		err = nil
	}
	return err
}

// selectCommitted passes to emit the committed changes of cursor c's
// bucket from c.done up to end, folded per key (fold), at most budget, and
// advances c. It stops at the first entry whose fate is not known yet. The
// changes' slices are valid only during the call.
func selectCommitted(t *aggmerge.Table, c *cursor, end uint64, budget int, f *fold, emit func(*change) error) error {
	if c.scanned < c.resume {
		c.scanned = c.resume
	}
	fresh := false // a marker of the blocking group arrived
	if c.scanned < end {
		err := t.ReadLogWith(c.bucket, c.scanned, aggmerge.LogRead{MarkersOnly: true}, func(e *aggmerge.Entry) error {
			if e.Offset >= end {
				return errStop
			}
			if e.Op == aggmerge.MarkerEntry {
				g := group(e.Writer.ID)
				c.markers = append(c.markers, marker{off: e.Offset, group: g, m: e.Marker})
				fresh = fresh || g == c.blocked
				c.marked, c.lastMarker = true, e.Offset
				if c.lastOf == nil {
					c.lastOf = map[string]lastMarker{}
				}
				c.lastOf[g] = lastMarker{writer: e.Writer, rollback: e.Marker.Kind == aggmerge.MarkerRollback, checkpoint: e.Marker.Checkpoint}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			return err
		}
		c.scanned = end
	}
	// Registrations are read after the log: an entry in it was written
	// after its writer registered, so a writer missing here is one that
	// never registered or was unregistered for good.
	registered := map[string]bool{}
	for _, r := range t.Writers() {
		registered[r.Writer] = true
	}
	if c.blocked != "" && !fresh && registered[c.blockedBy] {
		return nil // nothing can have changed the blocking entry's fate
	}
	return c.walk(t, end, budget, registered, f, emit)
}

// walk re-reads the log from c.resume, rebuilding the masks, and decides
// entries in order until one is undecided, end, or budget keys changed.
// The decided entries from c.done on are one range: their changes are
// folded per key (f) and emitted when the walk stops, and c.done moves to
// the range's end.
func (c *cursor) walk(t *aggmerge.Table, end uint64, budget int, registered map[string]bool, f *fold, emit func(*change) error) error {
	n := len(t.Schema().Values)
	var ch change
	ms := masks{}
	c.blocked = ""
	var expired []expiry // masks unmasked in the range
	// Most entries only move an open fold's after-image on: their images
	// are not decoded (the fold keeps the after-image encoded). Those
	// decoded are the ones a mask or a new fold needs.
	decode := func(e *aggmerge.Entry) bool {
		if e.Offset >= end {
			return false
		}
		d, _ := decide(c.markers, e, group(e.Writer.ID), registered)
		switch {
		case d == discarded:
			return true
		case d == undecided:
			return false
		}
		if _, masked := ms[string(e.EncodedKey)]; masked {
			return true
		}
		return e.Offset >= c.done && (e.Op == aggmerge.Delete || !f.open(e.EncodedKey))
	}
	err := t.ReadLogWith(c.bucket, c.resume, aggmerge.LogRead{Reuse: true, Decode: decode}, func(e *aggmerge.Entry) error {
		if e.Offset >= end {
			return errStop
		}
		fresh := e.Offset >= c.done
		if e.Op == aggmerge.MarkerEntry {
			from := ms.expire(e.Offset)
			if fresh {
				c.done = e.Offset + 1
				if from <= e.Offset {
					expired = append(expired, expiry{at: e.Offset, from: from})
				}
			}
			return nil
		}
		g := group(e.Writer.ID)
		d, m := decide(c.markers, e, g, registered)
		if d == undecided {
			c.blocked, c.blockedBy = g, e.Writer.ID
			return errStop
		}
		if fresh && f.len() >= budget {
			return errStop
		}
		if e.Op == aggmerge.UpdateBefore { // the +U carries both images
			if fresh {
				c.done = e.Offset + 1
			}
			return nil
		}
		key := e.EncodedKey
		mk := ms[string(key)]
		switch {
		case e.EncodedAfter != nil: // not decoded: an open fold, no mask
			if fresh {
				f.moveOn(key, e.EncodedAfter, e.Offset, m.m.Checkpoint, e.Undo)
			}
		case d == discarded:
			ms.add(string(key), e, g, m.off)
		case fresh:
			keep := ""
			if d == undoOf {
				keep = g
			}
			before, after := mk.project(e.Before, n, ""), mk.project(e.After, n, keep)
			if !sameRow(before, after) {
				ch = change{offset: e.Offset, key: e.Key, before: before, after: after, checkpoint: m.m.Checkpoint, undo: e.Undo}
				f.add(key, &ch)
			}
		}
		if d == undoOf && mk != nil {
			for col, mc := range mk.cols {
				if mc.group == g {
					delete(mk.cols, col)
				}
			}
			if len(mk.cols) == 0 {
				delete(ms, string(key))
			}
			if fresh {
				expired = append(expired, expiry{at: e.Offset, from: mk.from})
			}
		}
		if fresh {
			c.done = e.Offset + 1
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		f.reset()
		return err
	}
	// A restart after the range's last record, at offset last, reads on
	// from last+1 and must rebuild the masks of the entries it reads again:
	// those alive at the range's end and those that expired after last.
	resume := func(last uint64) uint64 {
		r := ms.from(last + 1)
		for _, x := range expired {
			if x.at > last {
				r = min(r, x.from)
			}
		}
		return r
	}
	if err := f.emit(resume, emit); err != nil {
		return err
	}
	c.resume = ms.from(c.done)
	i := 0
	for i < len(c.markers) && c.markers[i].off < c.resume {
		i++
	}
	c.markers = slices.Delete(c.markers, 0, i)
	return nil
}
