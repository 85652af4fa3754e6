package kafka

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"

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
	lag  prometheus.Gauge
}

// The operator state is one union list, so that whatever the parallelism
// and partition count on restore, every subtask sees every offset: each
// subtask writes one marker item and one item per partition it reads.
const (
	offsetsUnion = "kafka-offsets"
	itemMarker   = 0
	itemOffset   = 1
)

func encodeOffsets(parts map[topicPartition]*partState) [][]byte {
	sorted := make([]*partState, 0, len(parts))
	for _, ps := range parts {
		sorted = append(sorted, ps)
	}
	slices.SortFunc(sorted, func(a, b *partState) int {
		return cmp.Or(cmp.Compare(a.tp.topic, b.tp.topic), cmp.Compare(a.tp.partition, b.tp.partition))
	})
	items := make([][]byte, 0, 1+len(sorted))
	items = append(items, []byte{itemMarker})
	for _, ps := range sorted {
		b := make([]byte, 0, 1+binary.MaxVarintLen64+len(ps.tp.topic)+12)
		b = append(b, itemOffset)
		b = binary.AppendUvarint(b, uint64(len(ps.tp.topic)))
		b = append(b, ps.tp.topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(ps.tp.partition))
		b = binary.BigEndian.AppendUint64(b, uint64(ps.next))
		items = append(items, b)
	}
	return items
}

// decodeOffsets reads a restored union list. ok is false when the list
// holds no marker: the checkpoint predates this source (a fresh start).
func decodeOffsets(items [][]byte) (offsets map[topicPartition]int64, ok bool, err error) {
	offsets = make(map[topicPartition]int64)
	for _, it := range items {
		if len(it) == 1 && it[0] == itemMarker {
			ok = true
			continue
		}
		if len(it) == 0 || it[0] != itemOffset {
			return nil, false, fmt.Errorf("restore kafka offsets: unknown item: %w", state.ErrCorrupt)
		}
		n, w := binary.Uvarint(it[1:])
		rest := it[1:]
		if w <= 0 || uint64(len(rest)-w) != n+12 {
			return nil, false, fmt.Errorf("restore kafka offsets: bad item length: %w", state.ErrCorrupt)
		}
		rest = rest[w:]
		tp := topicPartition{topic: string(rest[:n]), partition: int32(binary.BigEndian.Uint32(rest[n:]))}
		off := int64(binary.BigEndian.Uint64(rest[n+4:]))
		if prev, dup := offsets[tp]; dup && prev != off {
			return nil, false, fmt.Errorf("restore kafka offsets: %s recorded twice (%d, %d): %w", tp, prev, off, state.ErrCorrupt)
		}
		offsets[tp] = off
	}
	return offsets, ok, nil
}
