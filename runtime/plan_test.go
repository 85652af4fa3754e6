package runtime

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testGraph builds untyped nodes for the planner, in job order.
type testGraph struct {
	nodes []*node
	byUID map[string]*node
}

// add adds operator uid of parallelism p reading from (a source if none)
// over edges of kind; keyed marks an operator with keyed state.
func (g *testGraph) add(uid string, p int, keyed bool, kind partKind, from ...string) {
	n := &node{id: len(g.nodes), uid: uid, parallelism: p, keyed: keyed, source: len(from) == 0}
	for _, f := range from {
		connect[int](g.byUID[f], n, kind, nil)
	}
	g.nodes = append(g.nodes, n)
	g.byUID[uid] = n
}

// describePlan prints each chain with its parallelism and its inputs, and
// where each input's upstream subtasks start in the chain's gate.
func describePlan(p *plan) []string {
	var out []string
	for _, c := range p.chains {
		var ins []string
		for _, e := range c.inputs {
			ins = append(ins, fmt.Sprintf("%s(p=%d) %s @%d", e.from.uid, e.from.parallelism, e.kind, inputOffset(c, e)))
		}
		s := fmt.Sprintf("%s p=%d", c.name, c.parallelism)
		if len(ins) > 0 {
			s += fmt.Sprintf(" <- %s; gate %d", strings.Join(ins, ", "), c.gateInputs())
		}
		out = append(out, s)
	}
	return out
}

// TestBuildPlan: which operators are chained into one goroutine, and how
// edges between chains are partitioned.
func TestBuildPlan(t *testing.T) {
	type op struct {
		uid   string
		p     int
		keyed bool
		kind  partKind
		from  []string
	}
	for _, tc := range []struct {
		name string
		ops  []op
		want []string
	}{
		{name: "forward edges of equal parallelism chain",
			ops:  []op{{uid: "src", p: 2}, {uid: "map", p: 2, from: []string{"src"}}, {uid: "sink", p: 2, from: []string{"map"}}},
			want: []string{"src -> map -> sink p=2"}},
		{name: "a forward edge of unequal parallelism becomes a rebalance",
			ops:  []op{{uid: "src", p: 1}, {uid: "map", p: 3, from: []string{"src"}}, {uid: "sink", p: 3, from: []string{"map"}}},
			want: []string{"src p=1", "map -> sink p=3 <- src(p=1) rebalance @0; gate 1"}},
		{name: "p=3 into p=1 too",
			ops:  []op{{uid: "src", p: 3}, {uid: "sink", p: 1, from: []string{"src"}}},
			want: []string{"src p=3", "sink p=1 <- src(p=3) rebalance @0; gate 3"}},
		{name: "a rebalance of equal parallelism is not chained",
			ops:  []op{{uid: "src", p: 2}, {uid: "spread", p: 2, kind: partRebalance, from: []string{"src"}}},
			want: []string{"src p=2", "spread p=2 <- src(p=2) rebalance @0; gate 2"}},
		{name: "a keyed operator starts a chain, its successors join it",
			ops: []op{{uid: "src", p: 2}, {uid: "sum", p: 2, keyed: true, kind: partHash, from: []string{"src"}},
				{uid: "sink", p: 2, from: []string{"sum"}}},
			want: []string{"src p=2", "sum -> sink p=2 <- src(p=2) hash @0; gate 2"}},
		{name: "a forward edge into a keyed operator is not chained",
			ops:  []op{{uid: "src", p: 2}, {uid: "proc", p: 2, keyed: true, from: []string{"src"}}},
			want: []string{"src p=2", "proc p=2 <- src(p=2) forward @0; gate 2"}},
		{name: "a stream read twice ends its chain",
			ops: []op{{uid: "src", p: 2}, {uid: "a", p: 2, from: []string{"src"}}, {uid: "b", p: 2, from: []string{"src"}},
				{uid: "b2", p: 2, from: []string{"b"}}},
			want: []string{"src p=2", "a p=2 <- src(p=2) forward @0; gate 2", "b -> b2 p=2 <- src(p=2) forward @0; gate 2"}},
		{name: "a union is not chained; its gate holds every upstream subtask",
			ops: []op{{uid: "s1", p: 1}, {uid: "s2", p: 2}, {uid: "u", p: 2, from: []string{"s1", "s2"}},
				{uid: "sink", p: 2, from: []string{"u"}}},
			want: []string{"s1 p=1", "s2 p=2", "u -> sink p=2 <- s1(p=1) rebalance @0, s2(p=2) forward @1; gate 3"}},
		{name: "broadcast keeps its kind",
			ops:  []op{{uid: "src", p: 1}, {uid: "all", p: 3, kind: partBroadcast, from: []string{"src"}}},
			want: []string{"src p=1", "all p=3 <- src(p=1) broadcast @0; gate 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &testGraph{byUID: map[string]*node{}}
			for _, o := range tc.ops {
				g.add(o.uid, o.p, o.keyed, o.kind, o.from...)
			}
			p, err := buildPlan(g.nodes)
			if err != nil {
				t.Fatal(err)
			}
			if got := describePlan(p); !slices.Equal(got, tc.want) {
				t.Errorf("plan:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			for _, n := range g.nodes {
				if c := p.chainOf[n]; c == nil || !slices.Contains(c.nodes, n) {
					t.Errorf("operator %q is not in the chain the plan maps it to", n.uid)
				}
			}
		})
	}
}

// TestBuildPlanRefusesAnOperatorWithoutInput: an operator that is not a
// source must read something.
func TestBuildPlanRefusesAnOperatorWithoutInput(t *testing.T) {
	_, err := buildPlan([]*node{{uid: "src", parallelism: 1, source: true}, {uid: "orphan", parallelism: 1}})
	if err == nil || !strings.Contains(err.Error(), `operator "orphan" has no input`) {
		t.Fatalf("err = %v, want operator \"orphan\" has no input", err)
	}
}
