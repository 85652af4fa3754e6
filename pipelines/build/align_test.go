package build

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// fastChain is chainJobs with both jobs checkpointing every 10 ms, A
// writing with 2 subtasks (whose commits the exporter may find half done:
// then it commits a transaction that ends no version), and B fetching 1 KiB
// at a time (about one partition of a version a fetch), so that B's
// checkpoints often come while it is reading a version of A. A's changelog
// has 4 partitions, read by B's 2 subtasks.
func fastChain(align bool) string {
	spec := strings.ReplaceAll(chainJobs, "checkpoint: {interval: 50ms}", "checkpoint: {interval: 10ms}")
	spec = strings.Replace(spec, "job: {name: users}", "job: {name: users, parallelism: 2}", 1)
	b := "format: upsert-json\n    fetch_max_bytes: 1KiB\n"
	if align {
		b += "    align: versions\n"
	}
	spec = strings.Replace(spec, "format: upsert-json\n", b, 1)
	return spec
}

// The load of the aligned chain tests: batches of alignOrders orders of
// alignUsers users.
const alignUsers, alignOrders = 50, 40

// misaligned checks every version of B against A: the version of A it
// names (none: A's empty table) must be exactly what B read, B's rows at
// it the aggregate of A's rows at that version (A's changelog replayed to
// its end offsets), and, where B's positions at its checkpoint are known,
// those positions exactly A's end offsets; and B's positions at each of
// its checkpoints must be the end offsets of a version of A. It returns one
// line per version or checkpoint that is not so.
func misaligned(t *testing.T, run chainRun) []string {
	t.Helper()
	aLog := kafkatest.ConsumeAll(t, run.brokers, run.aTopic)
	bLog := kafkatest.ConsumeAll(t, run.brokers, run.bTopic)
	byNumber := map[uint64]*export.Version{}
	for i := range run.as {
		byNumber[run.as[i].Version] = &run.as[i]
	}
	var bad []string
	for _, v := range run.bs {
		var ends []int64 // nil: A's empty table
		switch len(v.Upstream) {
		case 0:
		case 1:
			up := v.Upstream[0]
			u := byNumber[up.Version]
			if up.Topic != run.aTopic || u == nil {
				t.Fatalf("B's version %d names %+v, not a version of A", v.Version, up)
			}
			ends = u.EndOffsets
		default:
			t.Fatalf("B's version %d names %d upstream versions: %+v", v.Version, len(v.Upstream), v.Upstream)
		}
		want := regionAggregate(kafkatest.Replay(t, aLog, ends, false))
		got := regionRows(kafkatest.Replay(t, bLog, v.EndOffsets, false))
		if !maps.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("B's version %d (upstream %+v): %v, the aggregate of A there: %v", v.Version, v.Upstream, got, want))
			continue
		}
		at, ok := run.positions.At(barrier.CheckpointID(v.Writers[0].Checkpoint))
		if !ok {
			continue
		}
		pos := at[run.aTopic]
		for p := range max(len(ends), len(pos)) {
			var end int64
			if p < len(ends) {
				end = ends[p]
			}
			if pos[int32(p)] != end {
				bad = append(bad, fmt.Sprintf("B's version %d (checkpoint %d, upstream %+v): B's positions %v, A's end offsets %v",
					v.Version, v.Writers[0].Checkpoint, v.Upstream, pos, ends))
				break
			}
		}
	}
	// Every checkpoint of B, with a version or not, is at a boundary.
	last := run.bs[len(run.bs)-1].Writers[0].Checkpoint
	for id := range last + 1 {
		at, ok := run.positions.At(barrier.CheckpointID(id))
		if !ok {
			continue
		}
		pos := at[run.aTopic]
		boundary := !slices.ContainsFunc(slices.Collect(maps.Values(pos)), func(off int64) bool { return off > 0 })
		for i := 0; i < len(run.as) && !boundary; i++ {
			boundary = slices.Equal(run.as[i].EndOffsets, positionsList(pos, len(run.as[i].EndOffsets)))
		}
		if !boundary {
			bad = append(bad, fmt.Sprintf("B's checkpoint %d: B's positions %v are the end offsets of no version of A", id, pos))
		}
	}
	return bad
}

// positionsList returns the positions of partitions 0 to n-1.
func positionsList(pos map[int32]int64, n int) []int64 {
	out := make([]int64, n)
	for p := range out {
		out[p] = pos[int32(p)]
	}
	return out
}

// TestAlignedVersions runs A → B with B's changelog source aligned on
// A's versions (parallelism 2, 4 partitions): every version of B holds
// exactly a version of A, not a record more or less, and says which.
func TestAlignedVersions(t *testing.T) {
	run := runChain(t, fastChain(true), alignUsers, alignOrders)
	if bad := misaligned(t, run); len(bad) > 0 {
		t.Fatalf("%d of B's %d versions are not exactly a version of A:\n%s", len(bad), len(run.bs), strings.Join(bad, "\n"))
	}
	named := map[uint64]bool{}
	for _, v := range run.bs {
		for _, u := range v.Upstream {
			named[u.Version] = true
		}
	}
	t.Logf("A: %d versions; B: %d versions naming %d of them: %v", len(run.as), len(run.bs), len(named), slices.Sorted(maps.Keys(named)))
	if len(named) < 5 {
		t.Fatalf("B's versions name only %d of A's versions", len(named))
	}
}

// TestUnalignedVersionsBite: without align the same check fails: B's
// checkpoints cut A's versions in the middle.
func TestUnalignedVersionsBite(t *testing.T) {
	run := runChain(t, fastChain(false), alignUsers, alignOrders)
	bad := misaligned(t, run)
	if len(bad) == 0 {
		t.Fatalf("all of B's %d versions are exactly versions of A without align", len(run.bs))
	}
	t.Logf("%d of B's %d versions and its checkpoints are not exactly at a version of A, e.g. %s", len(bad), len(run.bs), bad[0])
}
