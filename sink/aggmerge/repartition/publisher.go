package repartition

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// finalPublish bounds the last round of a stopping Publisher.
const finalPublish = 30 * time.Second

// PublisherHold is the log hold (aggmerge.Table.Hold) of the Publishers of
// a table: each holds its bucket's log from its last seal's LogTo, so that
// the table's truncation never takes what it has not published, nor what
// a handover of the bucket back to this table compares against.
const PublisherHold = "repartition-publisher"

// Publisher publishes what stage 2 committed of one owned partition's
// bucket to the owner log: it tails the bucket's log from the handover's
// From, and at each commit marker of a checkpoint whose repartition
// position it knows, commits in one owner-log transaction the images of
// the entries below the marker's end and a Seal with that position. Entries
// of a rolled-back range are dropped. The table is written by stage 2's one
// exactly-once writer (and the rebuild before it): every commit marker in
// the bucket is that writer's.
type Publisher struct {
	h         *Handover
	table     *aggmerge.Table
	positions *kafka.Positions
	next      uint64 // the next log offset to read
	pending   []image
	resume    int64 // the Resume of the last seal
	published int   // rows published
}

// image is a change of the bucket not yet published.
type image struct {
	offset uint64
	key    []byte
	vals   []agg.Value // nil: the row is gone
}

// NewPublisher returns the publisher of a taken-over partition of table,
// whose stage-2 source records its positions in positions.
func NewPublisher(h *Handover, table *aggmerge.Table, positions *kafka.Positions) *Publisher {
	return &Publisher{h: h, table: table, positions: positions, next: h.From, resume: h.Resume}
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

// round reads the bucket's log from next to its end and publishes at its
// commit markers.
func (pb *Publisher) round(ctx context.Context) error {
	var markers []aggmerge.Marker
	err := pb.table.ReadLog(int(pb.h.Partition), pb.next, func(e *aggmerge.Entry) error {
		pb.next = e.Offset + 1
		switch e.Op {
		case aggmerge.UpdateBefore:
		case aggmerge.Insert, aggmerge.UpdateAfter:
			key, err := pb.table.EncodeKey(e.Key)
			if err != nil {
				return err
			}
			pb.pending = append(pb.pending, image{offset: e.Offset, key: key, vals: e.After})
		case aggmerge.Delete:
			key, err := pb.table.EncodeKey(e.Key)
			if err != nil {
				return err
			}
			pb.pending = append(pb.pending, image{offset: e.Offset, key: key})
		case aggmerge.MarkerEntry:
			markers = append(markers, e.Marker)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("publish partition %d: %w", pb.h.Partition, err)
	}
	// A marker's range is of entries before it, so handling the markers
	// after the read is the same as handling each where it was read.
	for _, m := range markers {
		if m.Kind == aggmerge.MarkerRollback {
			pb.drop(m.From, m.To)
			continue
		}
		if err := pb.publish(ctx, m); err != nil {
			return fmt.Errorf("publish partition %d checkpoint %d: %w", pb.h.Partition, m.Checkpoint, err)
		}
	}
	return nil
}

// drop forgets the pending images in [from, to): rolled back.
func (pb *Publisher) drop(from, to uint64) {
	kept := pb.pending[:0]
	for _, im := range pb.pending {
		if im.offset < from || im.offset >= to {
			kept = append(kept, im)
		}
	}
	pb.pending = kept
}

// publish commits the pending images below m.To and a seal of m's
// checkpoint, when the source's position at it is known and something
// changed.
func (pb *Publisher) publish(ctx context.Context, m aggmerge.Marker) error {
	at, ok := pb.positions.At(barrier.CheckpointID(m.Checkpoint))
	if !ok {
		return nil // of an earlier run: a later marker covers its entries
	}
	resume, ok := at[pb.h.cfg.Topic][pb.h.Partition]
	if !ok {
		return nil
	}
	n := 0
	for n < len(pb.pending) && pb.pending[n].offset < m.To {
		n++
	}
	if n == 0 && resume == pb.resume {
		return nil
	}
	// The last image of each key is its row at m.To.
	latest := make(map[string]int, n)
	for i, im := range pb.pending[:n] {
		latest[string(im.key)] = i
	}
	rows := make([]*kgo.Record, 0, len(latest))
	for i, im := range pb.pending[:n] {
		if latest[string(im.key)] != i {
			continue
		}
		v, err := appendImage(nil, pb.h.Epoch, im.vals)
		if err != nil {
			return err
		}
		rows = append(rows, &kgo.Record{Key: im.key, Value: v})
	}
	seal := Seal{Owner: pb.h.cfg.Owner, Epoch: pb.h.Epoch, BasedOn: pb.h.last, Resume: resume,
		Checkpoint: m.Checkpoint, Table: pb.table.ID(), LogTo: m.To}
	off, err := pb.h.commit(ctx, rows, seal)
	if err != nil {
		return err
	}
	pb.h.last, pb.resume, pb.published = off, resume, pb.published+len(rows)
	pb.pending = append(pb.pending[:0], pb.pending[n:]...)
	return pb.table.Hold(PublisherHold, map[int]uint64{int(pb.h.Partition): m.To})
}
