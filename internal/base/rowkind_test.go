package base

import "testing"

// TestRowKind pins the short forms, which the changelog's ebbflow.op header
// carries, and which kinds retract.
func TestRowKind(t *testing.T) {
	for _, c := range []struct {
		k        RowKind
		s        string
		retracts bool
	}{
		{Insert, "+I", false},
		{UpdateBefore, "-U", true},
		{UpdateAfter, "+U", false},
		{Delete, "-D", true},
		{Marker, "marker", false},
		{RowKind(9), "RowKind(9)", false},
	} {
		if got := c.k.String(); got != c.s {
			t.Errorf("RowKind(%d).String() = %q, want %q", uint8(c.k), got, c.s)
		}
		if got := c.k.Retracts(); got != c.retracts {
			t.Errorf("%s.Retracts() = %v, want %v", c.k, got, c.retracts)
		}
	}
	var zero RowKind
	if zero != Insert {
		t.Errorf("the zero RowKind is %s, want +I", zero)
	}
}
