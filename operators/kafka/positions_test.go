package kafka

import (
	"maps"
	"testing"

	"github.com/ebbflow/ebbflow/barrier"
)

// TestPositions: the subtasks' snapshots of a checkpoint merge; a restore
// records the restored checkpoint's positions and forgets the later
// checkpoints (their ids come again); only the newest maxPositions are
// kept; a partition at its earliest offset is at 0.
func TestPositions(t *testing.T) {
	p := NewPositions()
	a, b := topicPartition{"t", 0}, topicPartition{"t", 1}
	p.snapshot(3, map[topicPartition]*partState{a: {tp: a, next: 5}})
	p.snapshot(3, map[topicPartition]*partState{b: {tp: b, next: atEarliest}})
	p.snapshot(4, map[topicPartition]*partState{a: {tp: a, next: 9}})
	at, ok := p.At(3)
	if want := map[int32]int64{0: 5, 1: 0}; !ok || !maps.Equal(at["t"], want) {
		t.Fatalf("checkpoint 3: %v %v, want %v", at, ok, want)
	}
	p.restored(2, map[topicPartition]int64{a: 1, b: 2})
	if _, ok := p.At(3); ok {
		t.Fatal("checkpoint 3 kept after restoring checkpoint 2")
	}
	if at, ok := p.At(2); !ok || !maps.Equal(at["t"], map[int32]int64{0: 1, 1: 2}) {
		t.Fatalf("restored checkpoint 2: %v %v", at, ok)
	}
	for id := range barrier.CheckpointID(maxPositions + 10) {
		p.snapshot(id+10, map[topicPartition]*partState{a: {tp: a, next: int64(id)}})
	}
	if _, ok := p.At(2); ok {
		t.Fatal("the oldest checkpoint kept past the bound")
	}
	if at, ok := p.At(maxPositions + 19); !ok || at["t"][0] != maxPositions+9 {
		t.Fatalf("newest checkpoint: %v %v", at, ok)
	}
}
