package runtime

import (
	"sync"

	"github.com/ebbflow/ebbflow/barrier"
)

// batch is a pooled slice of records moving through one exchange. The
// receiving task returns it to its pool once processed, so a steady stream
// allocates nothing per batch.
type batch[T any] struct {
	items []T
	pool  *sync.Pool
}

func (b *batch[T]) release() {
	clear(b.items) // drop references so pooled batches keep nothing alive
	b.items = b.items[:0]
	b.pool.Put(b)
}

func newBatchPool[T any](size int) *sync.Pool {
	p := &sync.Pool{}
	p.New = func() any { return &batch[T]{items: make([]T, 0, size), pool: p} }
	return p
}

// eventKind says what an envelope carries.
type eventKind uint8

const (
	evRecords eventKind = iota
	evBarrier
	evCancel
	evEndOfInput
	evWatermark // wm: event time up to wm is complete on this input
	evIdle      // the input is idle: it holds no watermark back
	evActive    // the input is active again
)

// envelope is what travels through a gate: a batch of records or a control
// event, in stream order.
type envelope struct {
	kind    eventKind
	records any // *batch[T] for evRecords
	barrier barrier.Barrier
	cancel  barrier.CheckpointID
	wm      int64 // evWatermark
}
