package state

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

func items(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, v := range s {
		out[i] = []byte(v)
	}
	return out
}

func TestRedistribute(t *testing.T) {
	op := OperatorSnapshot{Parallelism: 3, Subtasks: []SubtaskSnapshot{
		// Out of order on purpose: items are concatenated in subtask order.
		{Subtask: 2, KeyGroups: RangeFor(16, 3, 2), Lists: map[string][][]byte{"l": items("d", "e", "f")}, Unions: map[string][][]byte{"u": items("y")}},
		{Subtask: 0, KeyGroups: RangeFor(16, 3, 0), Lists: map[string][][]byte{"l": items("a", "b")}, Unions: map[string][][]byte{"u": items("x")}},
		{Subtask: 1, KeyGroups: RangeFor(16, 3, 1), Lists: map[string][][]byte{"l": items("c"), "only1": items("z")}},
	}}
	for _, tc := range []struct {
		i          int
		lists      map[string][][]byte
		keyedFrom  []int
		unionItems [][]byte
	}{
		{0, map[string][][]byte{"l": items("a", "c", "e"), "only1": items("z")}, []int{0, 1}, items("x", "y")},
		{1, map[string][][]byte{"l": items("b", "d", "f"), "only1": {}}, []int{1, 2}, items("x", "y")},
	} {
		st, keyed := Redistribute(op, 16, 2, tc.i)
		if !reflect.DeepEqual(st.Lists, tc.lists) {
			t.Errorf("subtask %d lists = %q, want %q", tc.i, st.Lists, tc.lists)
		}
		if !reflect.DeepEqual(st.Unions, map[string][][]byte{"u": tc.unionItems}) {
			t.Errorf("subtask %d unions = %q", tc.i, st.Unions)
		}
		var from []int
		for _, s := range keyed {
			from = append(from, s.Subtask)
		}
		if !reflect.DeepEqual(from, tc.keyedFrom) {
			t.Errorf("subtask %d restores keyed state of %v, want %v", tc.i, from, tc.keyedFrom)
		}
	}
}

// TestRedistributeEveryItemOnce checks, for random old and new
// parallelisms, that every list item goes to exactly one new subtask and the
// keyed snapshots given to each cover its range.
func TestRedistributeEveryItemOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const maxPar = 32
	for range 200 {
		oldP, newP := 1+r.IntN(8), 1+r.IntN(8)
		op := OperatorSnapshot{Parallelism: oldP}
		want := map[string]int{}
		for i := range oldP {
			s := SubtaskSnapshot{Subtask: i, KeyGroups: RangeFor(maxPar, oldP, i), Lists: map[string][][]byte{"l": nil}}
			for j := range r.IntN(5) {
				item := fmt.Sprintf("%d.%d", i, j)
				s.Lists["l"] = append(s.Lists["l"], []byte(item))
				want[item] = 0
			}
			op.Subtasks = append(op.Subtasks, s)
		}
		for i := range newP {
			st, keyed := Redistribute(op, maxPar, newP, i)
			for _, item := range st.Lists["l"] {
				want[string(item)]++
			}
			owned, covered := RangeFor(maxPar, newP, i), 0
			for _, s := range keyed {
				lo, hi := max(s.KeyGroups.Start, owned.Start), min(s.KeyGroups.End, owned.End)
				covered += hi - lo
			}
			if covered != owned.End-owned.Start {
				t.Fatalf("%d->%d subtask %d: snapshots cover %d of %d groups", oldP, newP, i, covered, owned.End-owned.Start)
			}
		}
		for item, n := range want {
			if n != 1 {
				t.Fatalf("%d->%d: item %s given %d times", oldP, newP, item, n)
			}
		}
	}
}
