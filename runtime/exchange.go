package runtime

import (
	"context"
	"sync"
)

// exchange is the control side of the writer one upstream subtask uses for
// one outgoing edge; its data side is a consumer of the edge's record type.
type exchange interface {
	// flush sends every partly filled batch.
	flush() error
	// event flushes, then sends env to every downstream subtask.
	event(env envelope) error
	// buffered reports whether some records wait in a partly filled batch.
	buffered() bool
}

// target is one downstream subtask's gate and this writer's input index in it.
type target struct {
	gate  *gate
	input int
}

// exchangeSpec is what a writer is built from.
type exchangeSpec struct {
	ctx       context.Context
	subtask   int // the upstream subtask writing
	targets   []target
	batchSize int
	pool      *sync.Pool // this writer's batches (made by newExchangeWriter); a receiver releases each batch back to it
	records   func(int)  // counts records sent (metrics)
	time      *taskTime  // the writing subtask's: counts waits for room as backpressured
}

type exchangeWriter[T any] struct {
	x    *exchangeSpec
	kind partKind
	part func(T, int) int
	bufs []*batch[T]
	next int // round-robin position
}

func newExchangeWriter[T any](x *exchangeSpec, kind partKind, part func() func(T, int) int) *exchangeWriter[T] {
	w := &exchangeWriter[T]{x: x, kind: kind, bufs: make([]*batch[T], len(x.targets))}
	if x.pool == nil {
		x.pool = newBatchPool[T](x.batchSize)
	}
	if part != nil {
		w.part = part()
	}
	w.next = x.subtask % len(x.targets)
	return w
}

func (w *exchangeWriter[T]) buf(t int) *batch[T] {
	b := w.bufs[t]
	if b == nil {
		b = w.x.pool.Get().(*batch[T])
		w.bufs[t] = b
	}
	return b
}

func (w *exchangeWriter[T]) add(t int, v T) error {
	b := w.buf(t)
	b.items = append(b.items, v)
	if len(b.items) >= w.x.batchSize {
		return w.send(t)
	}
	return nil
}

func (w *exchangeWriter[T]) push(in []T) error {
	n := len(w.x.targets)
	switch w.kind {
	case partForward:
		return w.appendAll(w.x.subtask%n, in)
	case partRebalance:
		// Whole runs go to one target: round-robin by run, not by record.
		for len(in) > 0 {
			t := w.next
			b := w.buf(t)
			k := min(len(in), w.x.batchSize-len(b.items))
			b.items = append(b.items, in[:k]...)
			in = in[k:]
			if len(b.items) >= w.x.batchSize {
				if err := w.send(t); err != nil {
					return err
				}
				w.next = (w.next + 1) % n
			}
		}
	case partBroadcast:
		for t := range w.x.targets {
			if err := w.appendAll(t, in); err != nil {
				return err
			}
		}
	default: // hash, custom
		for _, v := range in {
			if err := w.add(w.part(v, n), v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *exchangeWriter[T]) appendAll(t int, in []T) error {
	for len(in) > 0 {
		b := w.buf(t)
		k := min(len(in), w.x.batchSize-len(b.items))
		b.items = append(b.items, in[:k]...)
		in = in[k:]
		if len(b.items) >= w.x.batchSize {
			if err := w.send(t); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *exchangeWriter[T]) send(t int) error {
	b := w.bufs[t]
	w.bufs[t] = nil
	if w.x.records != nil {
		w.x.records(len(b.items))
	}
	tg := w.x.targets[t]
	if err := tg.gate.send(w.x.ctx, tg.input, envelope{kind: evRecords, records: b}, w.x.time); err != nil {
		b.release()
		return err
	}
	return nil
}

func (w *exchangeWriter[T]) flush() error {
	for t, b := range w.bufs {
		if b != nil && len(b.items) > 0 {
			if err := w.send(t); err != nil {
				return err
			}
			if w.kind == partRebalance {
				// the run ended short of a batch: the next goes elsewhere
				w.next = (t + 1) % len(w.x.targets)
			}
		}
	}
	return nil
}

func (w *exchangeWriter[T]) buffered() bool {
	for _, b := range w.bufs {
		if b != nil && len(b.items) > 0 {
			return true
		}
	}
	return false
}

func (w *exchangeWriter[T]) event(env envelope) error {
	if err := w.flush(); err != nil {
		return err
	}
	for _, tg := range w.x.targets {
		if err := tg.gate.send(w.x.ctx, tg.input, env, w.x.time); err != nil {
			return err
		}
	}
	return nil
}
