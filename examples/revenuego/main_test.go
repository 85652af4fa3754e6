package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// TestRevenue runs the example and compares every region's row with the
// aggregates computed from the orders directly.
func TestRevenue(t *testing.T) {
	const n = 5000
	tbl, err := Run(context.Background(), t.TempDir(), n, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	type row struct {
		total, orders, largest int64
		last                   string // each region is one partition: in order
	}
	want := map[string]row{}
	for i := 0; i < n; i++ {
		o := OrderOf(i)
		w := want[o.Region]
		want[o.Region] = row{w.total + o.Cents, w.orders + 1, max(w.largest, o.Cents), o.Customer}
	}
	got := map[string]row{}
	err = tbl.Scan(func(r aggmerge.Row) error {
		got[r.Key[0].Str()] = row{r.Values[0].Int(), r.Values[1].Int(), r.Values[2].Int(), r.Values[3].Str()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d regions, want %d", len(got), len(want))
	}
	for region, w := range want {
		if got[region] != w {
			t.Errorf("%s: got %+v, want %+v", region, got[region], w)
		}
	}
}
