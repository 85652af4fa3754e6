package pipelines

import (
	"testing"
	"time"
)

func TestTableWindowBounds(t *testing.T) {
	w := &TableWindow{Size: time.Minute}
	for _, c := range []struct{ at, start string }{
		{"2026-12-02T01:00:00Z", "2026-12-02T01:00:00Z"},
		{"2026-12-02T01:00:59.999Z", "2026-12-02T01:00:00Z"},
		{"2026-12-02T01:01:00Z", "2026-12-02T01:01:00Z"},
		{"1969-12-31T23:59:30Z", "1969-12-31T23:59:00Z"}, // before the epoch: floor, not toward zero
		{"1969-12-31T23:59:00Z", "1969-12-31T23:59:00Z"},
	} {
		at, _ := time.Parse(time.RFC3339Nano, c.at)
		want, _ := time.Parse(time.RFC3339Nano, c.start)
		start, end := w.Bounds(at)
		if !start.Equal(want) || !end.Equal(want.Add(time.Minute)) {
			t.Errorf("Bounds(%s) = [%s, %s), want [%s, +1m)", c.at, start, end, c.start)
		}
	}
}
