package kafka

import (
	"maps"
	"slices"
	"sync"

	"github.com/ebbflow/ebbflow/barrier"
)

// maxPositions bounds the checkpoints whose positions a Positions keeps.
const maxPositions = 256

// Positions records where a source had read every partition at each
// checkpoint of its job: the offset of the next record to hand out, per
// topic and partition, merged over the source's subtasks. Give one to
// Config.Positions; every subtask records its partitions at each Snapshot,
// and on restore the restored checkpoint's positions (all subtasks', from
// the checkpoint) replace what was recorded after it. It keeps the newest
// 256 checkpoints. A reader of ebbflow changelogs uses it to tell which
// upstream versions a checkpoint consumed completely
// (sink/aggmerge/export.Upstream).
type Positions struct {
	mu struct {
		sync.Mutex
		at map[barrier.CheckpointID]map[topicPartition]int64
	}
}

// NewPositions returns an empty Positions.
func NewPositions() *Positions {
	p := &Positions{}
	p.mu.at = map[barrier.CheckpointID]map[topicPartition]int64{}
	return p
}

// At returns the positions at checkpoint id: topic → partition → next
// offset (0 for a partition that has handed out nothing from its earliest
// offset). ok is false when id was not recorded in this process (or is
// older than the newest 256).
func (p *Positions) At(id barrier.CheckpointID) (map[string]map[int32]int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.mu.at[id]
	if !ok {
		return nil, false
	}
	out := map[string]map[int32]int64{}
	for tp, next := range at {
		if out[tp.topic] == nil {
			out[tp.topic] = map[int32]int64{}
		}
		out[tp.topic][tp.partition] = max(next, 0)
	}
	return out, true
}

// snapshot records one subtask's partitions at checkpoint id.
func (p *Positions) snapshot(id barrier.CheckpointID, parts map[topicPartition]*partState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.mu.at[id]
	if at == nil {
		at = map[topicPartition]int64{}
		p.mu.at[id] = at
		p.trimLocked()
	}
	for tp, ps := range parts {
		at[tp] = ps.next
	}
}

// restored records the positions of the restored checkpoint id (every
// subtask's) and forgets the checkpoints after it: they belong to the
// timeline the restore abandons, and their ids will be reused.
func (p *Positions) restored(id barrier.CheckpointID, next map[topicPartition]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	maps.DeleteFunc(p.mu.at, func(c barrier.CheckpointID, _ map[topicPartition]int64) bool { return c > id })
	p.mu.at[id] = maps.Clone(next)
	p.trimLocked()
}

func (p *Positions) trimLocked() {
	for len(p.mu.at) > maxPositions {
		delete(p.mu.at, slices.Min(slices.Collect(maps.Keys(p.mu.at))))
	}
}
