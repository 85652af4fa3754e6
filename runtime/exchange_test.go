package runtime

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/ebbflow/ebbflow/barrier"
)

// exchangeStep is one call on a writer: push the records, then flush or
// send a barrier if asked.
type exchangeStep struct {
	push    []int
	flush   bool
	barrier barrier.CheckpointID // sent through event when > 0
}

// drainGate returns what reached g, in order (each batch as its records,
// each barrier as "barrier <id>"), and the number of records.
func drainGate(g *gate) (got []string, records int) {
	for {
		_, env, ok, _ := g.poll()
		if !ok {
			return got, records
		}
		switch env.kind {
		case evRecords:
			b := env.records.(*batch[int])
			got = append(got, fmt.Sprint(b.items))
			records += len(b.items)
			b.release()
		case evBarrier:
			got = append(got, fmt.Sprintf("barrier %d", env.barrier.ID))
		default:
			got = append(got, fmt.Sprintf("event %d", env.kind))
		}
	}
}

// TestExchangeWriters: which downstream subtask gets which records, in which
// batches, for every kind of edge.
func TestExchangeWriters(t *testing.T) {
	mod := func() func(int, int) int { return func(v, n int) int { return v % n } }
	for _, tc := range []struct {
		name             string
		kind             partKind
		part             func() func(int, int) int
		subtask, targets int
		steps            []exchangeStep
		want             [][]string // per target
	}{
		{name: "forward goes to the subtask of the same index", kind: partForward, subtask: 1, targets: 3,
			steps: []exchangeStep{{push: []int{1, 2, 3}, flush: true}},
			want:  [][]string{nil, {"[1 2]", "[3]"}, nil}},
		{name: "rebalance sends whole batches round-robin; a short run flushed moves on", kind: partRebalance, targets: 3,
			steps: []exchangeStep{{push: []int{1, 2, 3, 4, 5, 6, 7}}, {flush: true}, {push: []int{8}, flush: true}, {push: []int{9, 10}}},
			want:  [][]string{{"[1 2]", "[7]"}, {"[3 4]", "[8]"}, {"[5 6]", "[9 10]"}}},
		{name: "rebalance starts at the writer's own subtask", kind: partRebalance, subtask: 2, targets: 3,
			steps: []exchangeStep{{push: []int{1}, flush: true}, {push: []int{2}, flush: true}},
			want:  [][]string{{"[2]"}, nil, {"[1]"}}},
		{name: "rebalance of short runs spreads them", kind: partRebalance, targets: 2,
			steps: []exchangeStep{{push: []int{1}, flush: true}, {push: []int{2}, flush: true}, {push: []int{3}, flush: true}},
			want:  [][]string{{"[1]", "[3]"}, {"[2]"}}},
		{name: "broadcast copies every record to every target", kind: partBroadcast, subtask: 1, targets: 2,
			steps: []exchangeStep{{push: []int{1, 2, 3}, flush: true}},
			want:  [][]string{{"[1 2]", "[3]"}, {"[1 2]", "[3]"}}},
		{name: "hash routes each record by its partition", kind: partHash, part: mod, targets: 3,
			steps: []exchangeStep{{push: []int{0, 1, 2, 3, 4, 5, 6}, flush: true}},
			want:  [][]string{{"[0 3]", "[6]"}, {"[1 4]"}, {"[2 5]"}}},
		{name: "custom routes like hash", kind: partCustom, part: mod, subtask: 1, targets: 2,
			steps: []exchangeStep{{push: []int{5, 7, 2}, flush: true}},
			want:  [][]string{{"[2]"}, {"[5 7]"}}},
		{name: "an event flushes, then reaches every target", kind: partRebalance, targets: 3,
			steps: []exchangeStep{{push: []int{1}, barrier: 4}, {push: []int{2}, flush: true}},
			want:  [][]string{{"[1]", "barrier 4"}, {"barrier 4", "[2]"}, {"barrier 4"}}},
		{name: "a hash edge's event follows each target's records", kind: partHash, part: mod, targets: 2,
			steps: []exchangeStep{{push: []int{1, 2, 3}, barrier: 7}},
			want:  [][]string{{"[2]", "barrier 7"}, {"[1 3]", "barrier 7"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gates := make([]*gate, tc.targets)
			targets := make([]target, tc.targets)
			for i := range gates {
				gates[i] = newGate(1, 64)
				targets[i] = target{gate: gates[i]}
			}
			var sent int
			w := newExchangeWriter[int](&exchangeSpec{ctx: context.Background(), subtask: tc.subtask, targets: targets,
				batchSize: 2, records: func(n int) { sent += n }}, tc.kind, tc.part)
			pushed := 0
			for _, s := range tc.steps {
				if err := w.push(s.push); err != nil {
					t.Fatal(err)
				}
				pushed += len(s.push)
				if s.flush {
					if err := w.flush(); err != nil {
						t.Fatal(err)
					}
					if w.buffered() {
						t.Fatal("records buffered after a flush")
					}
				}
				if s.barrier > 0 {
					if err := w.event(envelope{kind: evBarrier, barrier: barrier.Barrier{ID: s.barrier}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			var received int
			for i, g := range gates {
				got, n := drainGate(g)
				if !slices.Equal(got, tc.want[i]) {
					t.Errorf("target %d got %q, want %q", i, got, tc.want[i])
				}
				received += n
			}
			if sent != received {
				t.Errorf("records counted as sent %d, received %d", sent, received)
			}
			if tc.kind != partBroadcast && received != pushed {
				t.Errorf("%d records received of %d pushed", received, pushed)
			}
		})
	}
}
