package writer

import (
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// A sink of only idempotent functions skips undo, unless its windows have
// a retention: a delete past the checkpoint left in place would let the
// replay bring a window's row back with part of its value.
func TestRetentionNeedsUndo(t *testing.T) {
	ts := agg.Type{Kind: agg.KindTimestamp}
	tbl, err := aggmerge.Open(t.TempDir(), aggmerge.Schema{
		Key:     []aggmerge.Column{{Name: "k", Type: agg.Type{Kind: agg.KindInt64}}, {Name: "window_start", Type: ts}, {Name: "window_end", Type: ts}},
		Values:  []aggmerge.Column{{Name: "hi", Type: agg.Type{Kind: agg.KindInt64}, Func: "max"}},
		Buckets: 2,
	}, aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	retain := time.Hour
	for _, c := range []struct {
		w    *Window
		want bool
	}{
		{nil, false},
		{&Window{Size: time.Minute}, false},
		{&Window{Size: time.Minute, Retain: &retain}, true},
	} {
		cfg := Config{Table: tbl, Window: c.w}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		if got := cfg.needsUndo(); got != c.want {
			t.Errorf("window %+v: needsUndo %v, want %v", c.w, got, c.want)
		}
	}
}
