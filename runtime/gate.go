package runtime

import (
	"context"
	"sync"
)

// gate is the input side of a subtask: one bounded queue per upstream
// subtask (an "input"), so that alignment can stop reading one input while
// the others go on. A full queue blocks its producer: backpressure.
//
// Producers and the consumer are woken through 1-buffered signal channels;
// a stale signal only causes a spurious re-check.
type gate struct {
	notEmpty chan struct{}   // signals the consumer
	notFull  []chan struct{} // per input, signals its producer
	capacity int

	mu struct {
		sync.Mutex
		queues  [][]envelope // per input, FIFO
		heads   []int        // index of the first queued envelope
		blocked []bool       // set by the consumer during alignment
		next    int          // round-robin start
	}
}

func newGate(inputs, capacity int) *gate {
	g := &gate{notEmpty: make(chan struct{}, 1), notFull: make([]chan struct{}, inputs), capacity: capacity}
	g.mu.queues = make([][]envelope, inputs)
	g.mu.heads = make([]int, inputs)
	g.mu.blocked = make([]bool, inputs)
	for i := range g.notFull {
		g.notFull[i] = make(chan struct{}, 1)
		g.mu.queues[i] = make([]envelope, 0, capacity)
	}
	return g
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// send enqueues env on input i, waiting while its queue is full: the
// producer's tt counts that wait as backpressured.
func (g *gate) send(ctx context.Context, i int, env envelope, tt *taskTime) error {
	waited := false
	for {
		g.mu.Lock()
		q := g.mu.queues[i]
		if len(q)-g.mu.heads[i] < g.capacity {
			if g.mu.heads[i] > 0 && len(q) == cap(q) { // compact in place
				n := copy(q, q[g.mu.heads[i]:])
				clear(q[n:])
				q = q[:n]
				g.mu.heads[i] = 0
			}
			g.mu.queues[i] = append(q, env)
			g.mu.Unlock()
			signal(g.notEmpty)
			if waited {
				tt.enter(working)
			}
			return nil
		}
		g.mu.Unlock()
		if !waited {
			waited = true
			tt.enter(waitingForOutput)
		}
		select {
		case <-g.notFull[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// poll takes the next envelope from an unblocked input, round-robin, without
// waiting. pending reports whether more envelopes are readable right now.
func (g *gate) poll() (input int, env envelope, ok, pending bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.mu.queues)
	for k := 0; k < n; k++ {
		i := (g.mu.next + k) % n
		if g.mu.blocked[i] || len(g.mu.queues[i]) == g.mu.heads[i] {
			continue
		}
		q := g.mu.queues[i]
		h := g.mu.heads[i]
		env = q[h]
		q[h] = envelope{}
		h++
		if h == len(q) {
			g.mu.queues[i], h = q[:0], 0
		}
		g.mu.heads[i] = h
		g.mu.next = (i + 1) % n
		signal(g.notFull[i])
		return i, env, true, g.readableLocked()
	}
	return 0, envelope{}, false, false
}

func (g *gate) readableLocked() bool {
	for i, q := range g.mu.queues {
		if !g.mu.blocked[i] && len(q) > g.mu.heads[i] {
			return true
		}
	}
	return false
}

// setBlocked blocks or unblocks input i.
func (g *gate) setBlocked(i int, b bool) {
	g.mu.Lock()
	g.mu.blocked[i] = b
	g.mu.Unlock()
}

// unblockAll unblocks every input.
func (g *gate) unblockAll() {
	g.mu.Lock()
	clear(g.mu.blocked)
	g.mu.Unlock()
	signal(g.notEmpty)
}
