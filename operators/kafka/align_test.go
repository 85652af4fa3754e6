package kafka

import (
	"maps"
	"testing"
	"time"
)

// TestAlignRoundTargetFinalWhenDue: a round's target moves on to each
// newer version decided until the round is due (the checkpoint interval
// after it started), never back (a subtask that knows only an older
// version does not pull it back), and from then on stays: the cut takes
// the newest version known when the checkpoint is due. With no wait it is
// final at once (the cut fixed right after the previous checkpoint).
func TestAlignRoundTargetFinalWhenDue(t *testing.T) {
	tp0, tp1 := topicPartition{"a", 0}, topicPartition{"a", 1}
	v := func(e0, e1 int64) map[topicPartition]int64 { return map[topicPartition]int64{tp0: e0, tp1: e1} }
	decides := func(t map[topicPartition]int64) func(map[topicPartition]int64, bool) (map[topicPartition]int64, bool) {
		return func(map[topicPartition]int64, bool) (map[topicPartition]int64, bool) { return t, t != nil }
	}
	t0 := time.Unix(1000, 0)
	var s alignRounds
	s.wait = time.Second
	s.begin(0, map[topicPartition]int64{tp0: 0, tp1: 0})
	if got, final, ok := s.target(alignFirst, t0, decides(v(1, 1))); !ok || !final || !maps.Equal(got, v(1, 1)) {
		t.Fatalf("first round: %v final %v ok %v; want v(1,1), final at once", got, final, ok)
	}
	steps := []struct {
		at        time.Duration
		decided   map[topicPartition]int64
		want      map[topicPartition]int64
		wantFinal bool
	}{
		{0, nil, nil, false},                              // nothing newer known yet: not decided
		{100 * time.Millisecond, v(3, 2), v(3, 2), false}, // provisional
		{300 * time.Millisecond, v(1, 1), v(3, 2), false}, // a subtask behind does not pull it back
		{900 * time.Millisecond, v(5, 4), v(5, 4), false},
		{time.Second, v(6, 4), v(6, 4), true}, // due: final at the newest
		{2 * time.Second, v(9, 9), v(6, 4), true},
	}
	for i, st := range steps {
		got, final, ok := s.target(7, t0.Add(st.at), decides(st.decided))
		if ok != (st.want != nil) || final != st.wantFinal || !maps.Equal(got, st.want) {
			t.Fatalf("step %d (%s): %v final %v ok %v; want %v final %v", i, st.at, got, final, ok, st.want, st.wantFinal)
		}
	}
	// The next round starts from the final target, at its own time.
	t1 := t0.Add(3 * time.Second)
	if got, final, _ := s.target(8, t1, decides(v(9, 9))); final || !maps.Equal(got, v(9, 9)) {
		t.Fatalf("next round: %v final %v; want v(9,9) provisional", got, final)
	}
	if got, final, _ := s.target(8, t1.Add(time.Second), decides(v(9, 9))); !final || !maps.Equal(got, v(9, 9)) {
		t.Fatalf("next round when due: %v final %v; want v(9,9) final", got, final)
	}

	var now alignRounds // no wait: final as soon as decided
	now.begin(0, map[topicPartition]int64{tp0: 0, tp1: 0})
	now.target(alignFirst, t0, decides(v(1, 1)))
	if got, final, _ := now.target(7, t0, decides(v(2, 2))); !final || !maps.Equal(got, v(2, 2)) {
		t.Fatalf("without wait: %v final %v; want v(2,2) final", got, final)
	}
}
