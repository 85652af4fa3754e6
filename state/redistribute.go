package state

import "slices"

// Redistribute returns what subtask i of a new parallelism p restores from
// the snapshot of its operator taken at any parallelism:
//
//   - the operator state: the items of each plain list of all old subtasks,
//     concatenated in old-subtask order, item j going to new subtask j mod p;
//     each union list whole (concatenated the same way) to every subtask;
//   - the keyed snapshots whose key groups overlap RangeFor(maxParallelism, p, i).
func Redistribute(op OperatorSnapshot, maxParallelism, p, i int) (OperatorState, []SubtaskSnapshot) {
	old := slices.Clone(op.Subtasks)
	slices.SortStableFunc(old, func(a, b SubtaskSnapshot) int { return a.Subtask - b.Subtask })
	st := OperatorState{Lists: map[string][][]byte{}, Unions: map[string][][]byte{}}
	next := map[string]int{} // index of the next item of each list, over all old subtasks
	for _, s := range old {
		for name, list := range s.Lists {
			items, ok := st.Lists[name]
			if !ok {
				items = [][]byte{}
			}
			for _, item := range list {
				if next[name]%p == i {
					items = append(items, item)
				}
				next[name]++
			}
			st.Lists[name] = items
		}
		for name, union := range s.Unions {
			st.Unions[name] = append(st.Unions[name], union...)
		}
	}
	owned := RangeFor(maxParallelism, p, i)
	var keyed []SubtaskSnapshot
	for _, s := range old {
		if !s.KeyGroups.Empty() && s.KeyGroups.Overlaps(owned) {
			keyed = append(keyed, s)
		}
	}
	return st, keyed
}
