package runtime

// Edge connects two chains of a job's plan: the tail of From sends to the
// head of To, every subtask of From to the subtasks of To that
// Partitioning picks.
type Edge struct {
	From, To string // chain names (TaskStatus.Chain)
	// Partitioning is forward, rebalance, broadcast, hash or custom, as the
	// plan left it (a forward edge between unequal parallelisms is a
	// rebalance).
	Partitioning string
}

// Edges returns the edges between the chains of the job's plan, in plan
// order of their target chains and, per chain, in input order. Before Run
// made the plan it is empty. Together with the chains of Status().Tasks it
// is the job graph a dashboard draws.
func (j *Job) Edges() []Edge { return j.board.edges() }

func (b *statusBoard) edges() []Edge {
	b.mu.Lock()
	tasks := b.tasks
	b.mu.Unlock()
	// The plan's chains are fixed once setTasks published them.
	var chains []*chain
	tail := map[*node]*chain{}
	for _, s := range tasks {
		if c := s.chain; s.subtask == 0 {
			chains = append(chains, c)
			tail[c.nodes[len(c.nodes)-1]] = c
		}
	}
	var out []Edge
	for _, c := range chains {
		for _, e := range c.inputs {
			out = append(out, Edge{From: tail[e.from].name, To: c.name, Partitioning: e.kind.String()})
		}
	}
	return out
}
