package operators

import (
	"sync/atomic"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// NewDiscard returns a factory of sinks that drop every record, counting
// them in n (if not nil): for benchmarks and dry runs.
func NewDiscard[T any](n *atomic.Int64) func() runtime.Sink[T] {
	return func() runtime.Sink[T] { return discard[T]{n} }
}

type discard[T any] struct{ n *atomic.Int64 }

func (discard[T]) Open(*runtime.Context) error { return nil }
func (d discard[T]) Write(b []T) error {
	if d.n != nil {
		d.n.Add(int64(len(b)))
	}
	return nil
}
func (discard[T]) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}
func (discard[T]) NotifyComplete(barrier.CheckpointID) error { return nil }
func (discard[T]) Close() error                              { return nil }
