package kafka

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
	"github.com/prometheus/client_golang/prometheus"
)

// SubtaskFor is the source subtask of parallelism p that reads a partition:
// (fnv32a(topic) + partition) mod p. The partitions of one topic are spread
// round-robin from a topic-dependent start, and the owner depends on nothing
// but the three arguments, so every subtask agrees without talking.
func SubtaskFor(topic string, partition int32, p int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(topic))
	return int((uint64(h.Sum32()) + uint64(partition)) % uint64(p))
}

type topicPartition struct {
	topic     string
	partition int32
}

func (tp topicPartition) String() string { return fmt.Sprintf("%s/%d", tp.topic, tp.partition) }

// atEarliest is the offset recorded for a partition that starts at its
// earliest offset and has handed out no record yet.
const atEarliest = -2

// partState is what a subtask knows of one partition it reads.
type partState struct {
	tp   topicPartition
	next int64 // offset of the next record to hand out, or atEarliest
	stop int64 // bounded: the offset it ends at; unbounded: noStop
	done bool  // bounded: reached stop, no longer fetched
	lag  prometheus.Gauge
	wm   *watermark.Split // with event time
	// aligned (Config.Align): the offset it holds at (reads nothing at or
	// past it), the records fetched past it (the partition is paused while
	// there are any) and since when.
	hold      int64
	held      []*kgo.Record
	heldSince time.Time
	// With Cuts: the offset past the last record taken (next is the first
	// held back, or read), the records taken with an event time past the
	// round's boundary (held back until the cut), the stretches handed out
	// before the restored checkpoint, and whether fetching is paused
	// (the partition passed the boundary).
	read   int64
	ahead  []*kgo.Record
	skips  []cutSkip
	paused bool
}

// noStop is the stop offset of a partition of an unbounded source.
const noStop = -1

// The operator state is one union list, so that whatever the parallelism
// and partition count on restore, every subtask sees every offset: each
// subtask writes one marker item and one item per partition it reads. A
// bounded subtask also writes a bounded marker and one stop item per
// partition; checkpoints from before bounded sources have neither. With
// event time, an item per partition holds the largest event time read
// (in the offset's place).
const (
	offsetsUnion  = "kafka-offsets"
	itemMarker    = 0
	itemOffset    = 1
	itemBounded   = 2
	itemStop      = 3
	itemEventTime = 4
	// With Cuts: itemRound (one per subtask, no topic) holds the round's
	// boundary and whether the subtask was at it; an itemSkip per
	// partition and stretch says that the records below an offset with an
	// event time at or before a boundary were handed out (the others,
	// held back past the boundary, were not).
	itemRound     = 5
	itemSkip      = 6
	itemFixedSize = 12 // partition and offset after the topic name
	itemSkipSize  = 20 // partition, offset and boundary
	itemRoundSize = 10 // kind, boundary, at the cut
)

// restoredOffsets is what a restored union list holds.
type restoredOffsets struct {
	ok      bool // false: no marker, the checkpoint predates this source
	bounded bool // written by a bounded source
	next    map[topicPartition]int64
	stops   map[topicPartition]int64
	times   map[topicPartition]int64 // largest event time read
	// With Cuts: the round (round 0: none recorded) and the stretches
	// handed out per partition.
	round  cutRound
	rounds int // subtasks that recorded one
	skips  map[topicPartition][]cutSkip
}

func appendItem(items [][]byte, kind byte, tp topicPartition, vals ...int64) [][]byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(tp.topic)+4+8*len(vals))
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(tp.topic)))
	b = append(b, tp.topic...)
	b = binary.BigEndian.AppendUint32(b, uint32(tp.partition))
	for _, v := range vals {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return append(items, b)
}

// encodeOffsets writes a subtask's union items; cut is its round with
// Cuts (nil: none).
func encodeOffsets(parts map[topicPartition]*partState, bounded, eventTime bool, cut *cutRound) [][]byte {
	sorted := make([]*partState, 0, len(parts))
	for _, ps := range parts {
		sorted = append(sorted, ps)
	}
	slices.SortFunc(sorted, func(a, b *partState) int {
		return cmp.Or(cmp.Compare(a.tp.topic, b.tp.topic), cmp.Compare(a.tp.partition, b.tp.partition))
	})
	items := make([][]byte, 0, 2+2*len(sorted))
	items = append(items, []byte{itemMarker})
	if bounded {
		items = append(items, []byte{itemBounded})
	}
	for _, ps := range sorted {
		items = appendItem(items, itemOffset, ps.tp, ps.next)
		if bounded {
			items = appendItem(items, itemStop, ps.tp, ps.stop)
		}
		if eventTime && ps.wm != nil {
			items = appendItem(items, itemEventTime, ps.tp, ps.wm.Max())
		}
		if cut != nil {
			for _, sk := range ps.skipsAt(cut.boundary) {
				items = appendItem(items, itemSkip, ps.tp, sk.below, sk.boundary)
			}
		}
	}
	if cut != nil {
		b := binary.BigEndian.AppendUint64([]byte{itemRound}, uint64(cut.boundary))
		at := byte(0)
		if cut.atCut {
			at = 1
		}
		items = append(items, append(b, at))
	}
	return items
}

// decodeOffsets reads a restored union list.
func decodeOffsets(items [][]byte) (restoredOffsets, error) {
	r := restoredOffsets{next: make(map[topicPartition]int64), stops: make(map[topicPartition]int64), times: make(map[topicPartition]int64)}
	for _, it := range items {
		if len(it) == 1 && it[0] == itemMarker {
			r.ok = true
			continue
		}
		if len(it) == 1 && it[0] == itemBounded {
			r.bounded = true
			continue
		}
		if len(it) > 0 && it[0] == itemRound {
			if len(it) != itemRoundSize || it[9] > 1 {
				return restoredOffsets{}, fmt.Errorf("restore kafka offsets: bad round item: %w", state.ErrCorrupt)
			}
			// The checkpoint is a cut if every subtask was at it (a stop
			// may find some there and others not); a subtask that read
			// nothing has no boundary yet.
			b, at := int64(binary.BigEndian.Uint64(it[1:])), it[9] == 1
			if b != 0 && r.round.boundary != 0 && b != r.round.boundary {
				return restoredOffsets{}, fmt.Errorf("restore kafka offsets: subtasks at boundaries %d and %d: %w", r.round.boundary, b, state.ErrCorrupt)
			}
			r.round = cutRound{boundary: max(b, r.round.boundary), atCut: at && (r.rounds == 0 || r.round.atCut)}
			r.rounds++
			continue
		}
		if len(it) == 0 || it[0] != itemOffset && it[0] != itemStop && it[0] != itemEventTime && it[0] != itemSkip {
			return restoredOffsets{}, fmt.Errorf("restore kafka offsets: unknown item: %w", state.ErrCorrupt)
		}
		size := uint64(itemFixedSize)
		if it[0] == itemSkip {
			size = itemSkipSize
		}
		n, w := binary.Uvarint(it[1:])
		rest := it[1:]
		if w <= 0 || uint64(len(rest)-w) != n+size {
			return restoredOffsets{}, fmt.Errorf("restore kafka offsets: bad item length: %w", state.ErrCorrupt)
		}
		rest = rest[w:]
		tp := topicPartition{topic: string(rest[:n]), partition: int32(binary.BigEndian.Uint32(rest[n:]))}
		off := int64(binary.BigEndian.Uint64(rest[n+4:]))
		if it[0] == itemSkip {
			if r.skips == nil {
				r.skips = map[topicPartition][]cutSkip{}
			}
			r.skips[tp] = append(r.skips[tp], cutSkip{below: off, boundary: int64(binary.BigEndian.Uint64(rest[n+12:]))})
			continue
		}
		into, what := r.next, "offset"
		switch it[0] {
		case itemStop:
			into, what = r.stops, "stop offset"
		case itemEventTime:
			into, what = r.times, "event time"
		}
		if prev, dup := into[tp]; dup && prev != off {
			return restoredOffsets{}, fmt.Errorf("restore kafka offsets: %s %s recorded twice (%d, %d): %w", tp, what, prev, off, state.ErrCorrupt)
		}
		into[tp] = off
	}
	return r, nil
}

// CheckpointedOffsets returns what a completed checkpoint holds of a Kafka
// source: per topic and partition, the next offset to read (every record
// before it was handed to the job before the checkpoint's barrier; 0 for a
// partition that was to start at the earliest offset and had handed out
// nothing). op is the source operator's snapshot in the checkpoint's
// metadata.
func CheckpointedOffsets(op state.OperatorSnapshot) (map[string]map[int32]int64, error) {
	var items [][]byte
	for _, st := range op.Subtasks {
		items = append(items, st.Unions[offsetsUnion]...)
	}
	r, err := decodeOffsets(items)
	if err != nil {
		return nil, err
	}
	if !r.ok {
		return nil, fmt.Errorf("kafka offsets: the checkpoint holds none: %w", state.ErrCorrupt)
	}
	out := map[string]map[int32]int64{}
	for tp, next := range r.next {
		if out[tp.topic] == nil {
			out[tp.topic] = map[int32]int64{}
		}
		out[tp.topic][tp.partition] = max(0, next) // atEarliest: none handed out
	}
	return out, nil
}
