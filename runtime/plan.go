package runtime

import (
	"fmt"
	"strings"
)

// chain is a sequence of nodes joined by forward edges of equal parallelism,
// run as one goroutine per subtask.
type chain struct {
	id          int
	name        string
	nodes       []*node
	parallelism int
	inputs      []*edge // edges into the head, from other chains
	outputs     []*edge // edges out of the tail, to other chains
}

// plan groups the job's nodes into chains.
type plan struct {
	chains  []*chain
	chainOf map[*node]*chain
}

// chainable reports whether e joins two nodes into one goroutine.
func chainable(e *edge) bool {
	return e.kind == partForward && e.from.parallelism == e.to.parallelism &&
		len(e.from.outputs) == 1 && len(e.to.inputs) == 1 && !e.to.keyed
}

func buildPlan(nodes []*node) (*plan, error) {
	p := &plan{chainOf: map[*node]*chain{}}
	for _, n := range nodes {
		if !n.source && len(n.inputs) == 0 {
			return nil, fmt.Errorf("operator %q has no input", n.uid)
		}
		for _, e := range n.inputs {
			if e.kind == partForward && e.from.parallelism != e.to.parallelism {
				e.kind = partRebalance // forward needs equal parallelism
			}
		}
		if len(n.inputs) == 1 && chainable(n.inputs[0]) {
			c := p.chainOf[n.inputs[0].from]
			c.nodes = append(c.nodes, n)
			p.chainOf[n] = c
			continue
		}
		c := &chain{id: len(p.chains), nodes: []*node{n}, parallelism: n.parallelism, inputs: n.inputs}
		p.chains = append(p.chains, c)
		p.chainOf[n] = c
	}
	for _, c := range p.chains {
		c.outputs = c.nodes[len(c.nodes)-1].outputs
		names := make([]string, len(c.nodes))
		for i, n := range c.nodes {
			names[i] = n.uid
		}
		c.name = strings.Join(names, " -> ")
	}
	return p, nil
}

// inputOffset returns where the inputs of edge e start in its target's gate.
func inputOffset(c *chain, e *edge) int {
	off := 0
	for _, in := range c.inputs {
		if in == e {
			return off
		}
		off += in.from.parallelism
	}
	panic("runtime: edge not an input of its chain")
}

func (c *chain) gateInputs() int {
	n := 0
	for _, e := range c.inputs {
		n += e.from.parallelism
	}
	return n
}
