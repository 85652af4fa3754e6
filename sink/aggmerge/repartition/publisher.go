package repartition

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// finalPublish bounds the last round of a stopping Publisher.
const finalPublish = 30 * time.Second

// PublisherHold is the log hold (aggmerge.Table.Hold) of the Publishers of
// a table: each holds its bucket's log from its last seal's LogTo, so that
// the table's truncation never takes what it has not published, nor what
// a handover of the bucket back to this table compares against.
const PublisherHold = "repartition-publisher"

// WriterGroup is one of stage 2's exactly-once writers, as a Publisher
// sees it: the group of its writer ids ("<job>/<sink>", the group of its
// commit markers) and the columns it writes (empty: all).
type WriterGroup struct {
	Group   string
	Columns []string
}

// Publisher publishes what stage 2 committed of one owned partition's
// bucket to the owner log: it tails the bucket's log from the handover's
// From, and once every writer of stage 2 wrote its commit marker of a
// checkpoint whose repartition position it knows, commits in one
// owner-log transaction the images of the rows changed below the markers
// and a Seal with that position. Entries of a rolled-back range are
// dropped.
//
// Each writer's marker ends where that writer took its snapshot, and the
// writers take theirs one after the other, so no single log offset is of
// the checkpoint for all of them: a row's image takes each writer's
// columns as of that writer's marker (the after-image of the row's last
// change below it, else the before-image of its first change after it),
// which is the row as of the checkpoint, as every change of a writer's
// columns is that writer's. The seal's LogTo is the lowest of the markers:
// past it the table may hold changes of the next checkpoint.
//
// With a Changelog, the same transaction also writes, to the changelog
// topic's partition of the bucket, each row changed since the previous
// seal as a change from its image then to its image now: the changelog
// moves with the bucket, exactly once, fenced as the owner log is.
type Publisher struct {
	h         *Handover
	table     *aggmerge.Table
	positions *kafka.Positions
	groups    map[string][]int // writer group → its columns' indexes
	rest      []int            // the columns no writer of stage 2 writes
	next      uint64           // the next log offset to read
	pending   []change
	marks     map[uint64]map[string]uint64 // checkpoint → writer group → marker's To
	resume    int64                        // the Resume of the last seal
	published int                          // rows published
	changelog *export.Encoder              // nil: no changelog
	metrics   *Metrics                     // nil: none
	// prevCuts and prevHi are the cuts of the last seal (at first the
	// handover's From): a row's image there is its changelog before-image.
	prevCuts map[string]uint64
	prevHi   uint64
}

// Changelog is the changelog topic of a table with dynamic ownership
// (docs/SCALING.md): one partition per bucket, written by the bucket's
// Publisher in its owner-log transactions.
type Changelog struct {
	Table  string // the table's name, in the records' headers
	Topic  string
	Format export.Format // UpsertJSON when empty
}

// change is a change of a row of the bucket not yet published, by a
// writer of group.
type change struct {
	offset        uint64
	group         string
	key           []byte
	keyVals       []agg.Value // the key decoded
	before, after []agg.Value // nil: no row
}

// NewPublisher returns the publisher of a taken-over partition of table,
// whose stage-2 source records its positions in positions and whose
// writers are writers; with changelog (nil: none) it also writes the
// table's changelog of the bucket.
func NewPublisher(h *Handover, table *aggmerge.Table, positions *kafka.Positions, writers []WriterGroup, changelog *Changelog) (*Publisher, error) {
	pb := &Publisher{h: h, table: table, positions: positions, next: h.From, resume: h.Resume,
		groups: map[string][]int{}, marks: map[uint64]map[string]uint64{}, prevCuts: map[string]uint64{}, prevHi: h.From}
	sch := table.Schema()
	written := make([]bool, len(sch.Values))
	for _, w := range writers {
		var cols []int
		for _, name := range w.Columns {
			i := sch.ValueIndex(name)
			if i < 0 {
				return nil, fmt.Errorf("publisher of partition %d: writer %s: no value column %q", h.Partition, w.Group, name)
			}
			cols = append(cols, i)
		}
		if len(w.Columns) == 0 {
			cols = make([]int, len(sch.Values))
			for i := range cols {
				cols[i] = i
			}
		}
		for _, i := range cols {
			if written[i] {
				return nil, fmt.Errorf("publisher of partition %d: column %q written by two writers", h.Partition, sch.Values[i].Name)
			}
			written[i] = true
		}
		pb.groups[w.Group] = cols
	}
	if len(pb.groups) == 0 {
		return nil, fmt.Errorf("publisher of partition %d: no writer", h.Partition)
	}
	for i, w := range written {
		if !w {
			pb.rest = append(pb.rest, i)
		}
	}
	for g := range pb.groups {
		pb.prevCuts[g] = h.From
	}
	if changelog != nil {
		enc, err := export.NewEncoder(export.EncoderConfig{Schema: sch, Table: changelog.Table, TableID: table.ID().String(),
			TransactionalID: h.cfg.transactionalID(h.Partition), Topic: changelog.Topic, Format: changelog.Format})
		if err != nil {
			return nil, fmt.Errorf("publisher of partition %d: changelog: %w", h.Partition, err)
		}
		pb.changelog = enc
	}
	return pb, nil
}

// Published returns the rows published so far.
func (pb *Publisher) Published() int { return pb.published }

// Run publishes until ctx ends, then publishes what the log holds of
// checkpoints completed by then (stop stage 2 first, so its final
// checkpoint is in) and returns. An error (a newer owner fenced this one:
// the error says so) stops it. The end of ctx never cuts a round short (a
// transaction half ended would leave the producer unusable for the last
// round): each round is bounded by finalPublish instead.
func (pb *Publisher) Run(ctx context.Context) error {
	bucket := int(pb.h.Partition)
	round := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalPublish)
		defer cancel()
		return pb.round(rctx)
	}
	for {
		err := pb.table.WaitLog(ctx, bucket, pb.next)
		if ctx.Err() != nil {
			return round()
		}
		if err != nil {
			return fmt.Errorf("publish partition %d: %w", pb.h.Partition, err)
		}
		if err := round(); err != nil {
			return err
		}
	}
}

// round reads the bucket's log from next to its end and publishes every
// checkpoint that all writers marked committed.
func (pb *Publisher) round(ctx context.Context) error {
	var rollbacks []aggmerge.Entry
	err := pb.table.ReadLog(int(pb.h.Partition), pb.next, func(e *aggmerge.Entry) error {
		pb.next = e.Offset + 1
		group, _ := base.GroupOf(e.Writer.ID)
		switch e.Op {
		case aggmerge.UpdateBefore: // its UpdateAfter has both images
		case aggmerge.Insert, aggmerge.UpdateAfter, aggmerge.Delete:
			key, err := pb.table.EncodeKey(e.Key)
			if err != nil {
				return err
			}
			c := change{offset: e.Offset, group: group, key: key, keyVals: e.Key, after: e.After}
			if e.Op != aggmerge.Insert {
				c.before = e.Before
			}
			pb.pending = append(pb.pending, c)
		case aggmerge.MarkerEntry:
			if e.Marker.Kind == aggmerge.MarkerRollback {
				rollbacks = append(rollbacks, *e)
			} else if _, ok := pb.groups[group]; ok {
				if pb.marks[e.Marker.Checkpoint] == nil {
					pb.marks[e.Marker.Checkpoint] = map[string]uint64{}
				}
				pb.marks[e.Marker.Checkpoint][group] = e.Marker.To
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("publish partition %d: %w", pb.h.Partition, err)
	}
	// A marker's range is of entries before it, so handling the markers
	// after the read is the same as handling each where it was read.
	pb.drop(rollbacks)
	for _, cp := range slices.Sorted(maps.Keys(pb.marks)) {
		cuts := pb.marks[cp]
		if len(cuts) < len(pb.groups) {
			continue // a writer has not marked it yet
		}
		if err := pb.publish(ctx, cp, cuts); err != nil {
			return fmt.Errorf("publish partition %d checkpoint %d: %w", pb.h.Partition, cp, err)
		}
		for old := range pb.marks {
			if old <= cp {
				delete(pb.marks, old) // a later checkpoint covers an earlier one
			}
		}
	}
	return nil
}

// drop forgets the pending changes that rollbacks (rollback markers)
// rolled back. A row whose first pending change was rolled back gets that
// change's before-image as the before-image of its first change kept: the
// row as it was before the rolled-back range (the kept change's own
// before-image holds the values undone, and an image at a cut before it,
// the owner log's or the changelog's before-image, is read from there).
// The later kept changes' images may still hold undone values in the
// columns of a rolled-back writer, but never where rowAt takes that
// writer's columns: its cuts are before its range or after its undo.
func (pb *Publisher) drop(rollbacks []aggmerge.Entry) {
	if len(rollbacks) == 0 {
		return
	}
	type rolled struct {
		group    string
		from, to uint64
	}
	ranges := make([]rolled, len(rollbacks))
	for i, e := range rollbacks {
		group, _ := base.GroupOf(e.Writer.ID)
		ranges[i] = rolled{group, e.Marker.From, e.Marker.To}
	}
	isRolled := func(c *change) bool {
		for _, r := range ranges {
			if c.group == r.group && c.offset >= r.from && c.offset < r.to {
				return true
			}
		}
		return false
	}
	// first is, per row, whether its first pending change was rolled back
	// (and no change of it is kept yet), with that change's before-image.
	type firstChange struct {
		rolled bool
		before []agg.Value
	}
	first := map[string]firstChange{}
	kept := pb.pending[:0]
	for _, c := range pb.pending {
		k := string(c.key)
		f, seen := first[k]
		if isRolled(&c) {
			if !seen {
				first[k] = firstChange{rolled: true, before: c.before}
			}
			continue
		}
		if f.rolled {
			c.before = f.before
		}
		first[k] = firstChange{}
		kept = append(kept, c)
	}
	clear(pb.pending[len(kept):])
	pb.pending = kept
}

// publish commits the images of the rows changed below the cuts (each
// writer group's marker of checkpoint cp) and a seal of cp, when the
// source's position at it is known and something changed.
func (pb *Publisher) publish(ctx context.Context, cp uint64, cuts map[string]uint64) error {
	at, ok := pb.positions.At(barrier.CheckpointID(cp))
	if !ok {
		return nil // of an earlier run: a later checkpoint covers its changes
	}
	resume, ok := at[pb.h.cfg.Topic][pb.h.Partition]
	if !ok {
		return nil
	}
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for _, to := range cuts {
		lo, hi = min(lo, to), max(hi, to)
	}
	byKey := map[string][]int{} // key → its pending changes, in log order
	var keys []string           // the keys changed below hi, in order
	for i, c := range pb.pending {
		k := string(c.key)
		if _, seen := byKey[k]; !seen && c.offset < hi {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	if len(keys) == 0 && resume == pb.resume {
		return nil
	}
	rows := make([]*kgo.Record, 0, len(keys))
	var changes []*kgo.Record
	for _, k := range keys {
		after := pb.image(byKey[k], cuts, hi)
		v, err := appendImage(nil, pb.h.Epoch, after)
		if err != nil {
			return err
		}
		rows = append(rows, &kgo.Record{Key: []byte(k), Value: v})
		if pb.changelog != nil {
			changes = pb.appendChange(changes, byKey[k], after, hi, cp)
		}
	}
	seal := Seal{Owner: pb.h.cfg.Owner, Epoch: pb.h.Epoch, BasedOn: pb.h.last, Resume: resume,
		Checkpoint: cp, Table: pb.table.ID(), LogTo: lo}
	off, err := pb.h.commit(ctx, rows, changes, seal)
	if err != nil {
		return err
	}
	pb.h.last, pb.resume, pb.published = off, resume, pb.published+len(rows)
	pb.prevCuts, pb.prevHi = cuts, hi
	pb.metrics.sealed(len(changes))
	// A change below every cut is published; one at or past the lowest is
	// kept: it may be of a later checkpoint for some writer.
	pb.pending = slices.DeleteFunc(pb.pending, func(c change) bool { return c.offset < lo })
	return pb.table.Hold(PublisherHold, map[int]uint64{int(pb.h.Partition): lo})
}

// appendChange appends to dst the changelog records of a row changed below
// hi (its pending changes, in log order), from its image at the previous
// seal to after, its image now; none when the two are alike (a row whose
// change was published with the previous seal's image, kept pending for
// another writer's cut).
func (pb *Publisher) appendChange(dst []*kgo.Record, changes []int, after []agg.Value, hi, cp uint64) []*kgo.Record {
	before := pb.image(changes, pb.prevCuts, pb.prevHi)
	if sameImage(before, after) {
		return dst
	}
	c := export.RowChange{Key: pb.pending[changes[0]].keyVals, Before: before, After: after, Checkpoint: cp}
	for _, i := range changes {
		if pb.pending[i].offset < hi {
			c.Offset = pb.pending[i].offset
		}
	}
	return pb.changelog.Append(dst, int(pb.h.Partition), c)
}

// sameImage reports whether two row images (nil: no row) are alike.
func sameImage(a, b []agg.Value) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return slices.EqualFunc(a, b, agg.Value.Equal)
}

// image returns a row's values as of the cuts, from its pending changes
// (indexes into pending, in log order): each writer group's columns as of
// its cut, the columns no writer of stage 2 writes as of hi. nil: the row
// is gone at every cut.
func (pb *Publisher) image(changes []int, cuts map[string]uint64, hi uint64) []agg.Value {
	vals := make([]agg.Value, len(pb.table.Schema().Values))
	exists := false
	take := func(cols []int, cut uint64) {
		row := pb.rowAt(changes, cut)
		if row == nil {
			return // absent at the cut
		}
		exists = true
		for _, i := range cols {
			vals[i] = row[i]
		}
	}
	for group, cols := range pb.groups {
		take(cols, cuts[group])
	}
	take(pb.rest, hi)
	if !exists {
		return nil
	}
	return vals
}

// rowAt returns the row at log offset cut (nil: no row): the after-image
// of its last change below cut, else the before-image of its first change.
func (pb *Publisher) rowAt(changes []int, cut uint64) []agg.Value {
	first := pb.pending[changes[0]]
	if first.offset >= cut {
		return first.before
	}
	last := first
	for _, i := range changes[1:] {
		if pb.pending[i].offset >= cut {
			break
		}
		last = pb.pending[i]
	}
	return last.after
}
