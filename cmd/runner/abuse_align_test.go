package main

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// TestAbuseAlignedSIGKILL runs examples/chained (TestChainedSIGKILL's
// chain) with B's source aligned on A's versions (align: versions, B at
// parallelism 2 over A's 4 partitions) and B's table published with
// versions, and kills A 3 times and B 8 times with SIGKILL at seeded random
// moments, many of them while B holds at a version boundary (it holds from
// reaching one until its next checkpoint, every 500 ms). After both ran to
// the end, every version B published, across all its lives, is derived from
// exactly the version of A it names: B's table replayed to the version's
// end offsets is the aggregate of A's table replayed to that version's;
// and the versions of A that B's versions name never go back. B's status
// (API) counts its cut gates.
func TestAbuseAlignedSIGKILL(t *testing.T) {
	ch := newChain(t)
	ch.b.args = append(ch.b.args, "--set", "source.kafka.align=versions")
	ch.crash(3, 8)
	if d := ch.settle(90 * time.Second); d != "" {
		t.Fatalf("seed %d: %s", ch.seed, d)
	}
	// B's status counts the cut gates of its aligned source's 2 subtasks.
	for _, r := range []*jobProc{ch.a, ch.b} {
		var jobs []jobStatus
		getJSON(t, "http://"+liveRunner(r.dir)+"/api/v1/jobs", &jobs)
		if g := jobs[0].CutGates; (r == ch.b) != (g != nil) || g != nil && (g.Total != 2 || g.Open > 2) {
			t.Fatalf("seed %d: runner %s: cut gates %+v", ch.seed, r.name, g)
		}
	}
	ch.stop()
	if d := ch.diff(); d != "" {
		t.Fatalf("seed %d: after a graceful stop: %s", ch.seed, d)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := kafka.Connection{Brokers: ch.brokers}
	as, err := export.ReadVersions(ctx, conn, ch.changelog+".versions")
	if err != nil {
		t.Fatal(err)
	}
	bs, err := export.ReadVersions(ctx, conn, ch.bLog+".versions")
	if err != nil {
		t.Fatal(err)
	}
	aEnds := map[uint64][]int64{}
	for _, v := range as {
		aEnds[v.Version] = v.EndOffsets
	}
	aRecs, bRecs := kafkatest.ConsumeStable(t, ch.brokers, ch.changelog), kafkatest.ConsumeStable(t, ch.brokers, ch.bLog)
	var prev uint64
	named := map[uint64]bool{}
	for _, v := range bs {
		var ends []int64 // none: A's empty table
		if len(v.Upstream) > 1 {
			t.Fatalf("seed %d: B's version %d names %d upstream versions: %+v", ch.seed, v.Version, len(v.Upstream), v.Upstream)
		}
		if len(v.Upstream) == 1 && v.Upstream[0].Version > 0 { // 0: none of A's read whole
			up := v.Upstream[0].Version
			var ok bool
			if ends, ok = aEnds[up]; !ok {
				t.Fatalf("seed %d: B's version %d names A's version %d, which A did not publish", ch.seed, v.Version, up)
			}
			if up < prev {
				t.Fatalf("seed %d: B's version %d names A's version %d, after %d", ch.seed, v.Version, up, prev)
			}
			prev = up
			named[up] = true
		}
		want := regionsOf(kafkatest.Replay(t, aRecs, ends, ch.format == export.DebeziumJSON))
		got := regionRowsOf(kafkatest.Replay(t, bRecs, v.EndOffsets, false))
		if !maps.Equal(got, want) {
			t.Fatalf("seed %d: B's version %d (upstream %+v): %v; the aggregate of A there: %v", ch.seed, v.Version, v.Upstream, got, want)
		}
	}
	t.Logf("seed %d: A killed %d times, B %d times; B's %d versions are each exactly one of A's %d versions (%d named)",
		ch.seed, ch.a.kills, ch.b.kills, len(bs), len(as), len(named))
	if len(named) < 5 {
		t.Fatalf("seed %d: B's versions name only %d versions of A", ch.seed, len(named))
	}
}

// regionsOf is B's aggregate of A's rows (as replayed from A's changelog,
// or read in a snapshot).
func regionsOf(aRows map[string]map[string]any) map[string]regionSum {
	want := map[string]regionSum{}
	for _, r := range aRows {
		s := want[fmt.Sprint(r["region"])]
		s.total += jsonInt(r["total"])
		s.users++
		want[fmt.Sprint(r["region"])] = s
	}
	return want
}

// regionRowsOf is B's rows (as replayed from B's changelog, or read in a
// snapshot) by region, without the empty groups: a region whose users all
// left stays with total 0 and 0 users.
func regionRowsOf(bRows map[string]map[string]any) map[string]regionSum {
	got := map[string]regionSum{}
	for _, r := range bRows {
		if s := (regionSum{total: jsonInt(r["total"]), users: jsonInt(r["users"])}); s != (regionSum{}) {
			got[fmt.Sprint(r["region"])] = s
		}
	}
	return got
}

// jsonInt reads an integer that encoding/json decoded as a float64 (num
// would read 1.143353e+06 as 0), or that a snapshot's row holds (int64).
func jsonInt(v any) int64 {
	switch n := v.(type) {
	case float64:
		return int64(n)
	case int64:
		return n
	}
	return 0
}
