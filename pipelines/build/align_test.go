package build

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// fastChain is chainJobs with A writing with 2 subtasks (whose commits the
// exporter may find half done: then it commits a transaction that ends no
// version), and B checkpointing every 10 ms and fetching 1 KiB at a time
// (about one partition of a version a fetch), so that B's checkpoints
// often come while it is reading a version of A. A's changelog has 4
// partitions, read by B's 2 subtasks.
func fastChain(align bool) string {
	i := strings.LastIndex(chainJobs, "checkpoint: {interval: 50ms}")
	spec := chainJobs[:i] + "checkpoint: {interval: 10ms}" + chainJobs[i+len("checkpoint: {interval: 50ms}"):]
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
	aLog := kafkatest.ConsumeStable(t, run.brokers, run.aTopic)
	bLog := kafkatest.ConsumeStable(t, run.brokers, run.bTopic)
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
			if up.Version == 0 {
				break // none of A's read whole
			}
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
	run := runChain(t, fastChain(true), alignUsers, alignOrders, true)
	if bad := misaligned(t, run); len(bad) > 0 {
		t.Fatalf("%d of B's %d versions are not exactly a version of A:\n%s", len(bad), len(run.bs), strings.Join(bad, "\n"))
	}
	named := map[uint64]bool{}
	for _, v := range run.bs {
		for _, u := range v.Upstream {
			named[u.Version] = true
			if !u.Exact {
				t.Fatalf("B's version %d names %+v, not exact", v.Version, u)
			}
		}
	}
	t.Logf("A: %d versions; B: %d versions naming %d of them: %v", len(run.as), len(run.bs), len(named), slices.Sorted(maps.Keys(named)))
	if len(named) < 5 {
		t.Fatalf("B's versions name only %d of A's versions", len(named))
	}
	// The holds are measured: a partition held with records past its
	// boundary is observed when the checkpoint there releases it.
	mfs, err := run.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var holds uint64
	var held float64
	for _, mf := range mfs {
		if mf.GetName() == "ebbflow_alignment_hold_seconds" {
			for _, m := range mf.GetMetric() {
				holds += m.GetHistogram().GetSampleCount()
				held += m.GetHistogram().GetSampleSum()
			}
		}
	}
	t.Logf("ebbflow_alignment_hold_seconds: %d holds, %.3f s in all", holds, held)
	if holds == 0 {
		t.Fatal("ebbflow_alignment_hold_seconds observed no hold")
	}
}

// TestUnalignedVersionsBite: without align the same check fails: B's
// checkpoints cut A's versions in the middle.
func TestUnalignedVersionsBite(t *testing.T) {
	run := runChain(t, fastChain(false), alignUsers, alignOrders, true)
	bad := misaligned(t, run)
	if len(bad) == 0 {
		t.Fatalf("all of B's %d versions are exactly versions of A without align", len(run.bs))
	}
	t.Logf("%d of B's %d versions and its checkpoints are not exactly at a version of A, e.g. %s", len(bad), len(run.bs), bad[0])
}

// unionJobs: A (users) and A2 (users2) total the same orders into two
// tables; B, aligned on the versions of both, totals the union of their
// changelogs per region.
const unionJobs = `
job: {name: users, parallelism: 2}
source:
  kafka: {brokers: [%[1]s], topics: [%[2]s], format: json, schema: {user: string, region: string, amount: int64}}
sink:
  table:
    name: user_totals
    primary_key: [user]
    buckets: 4
    columns: {region: {agg: last_value}, total: {agg: sum, from: amount}}
    changelog: {topic: %[3]s}
checkpoint: {interval: 50ms}
---
job: {name: users2}
source:
  kafka: {brokers: [%[1]s], topics: [%[2]s], format: json, schema: {user: string, region: string, amount: int64}}
sink:
  table:
    name: user_totals2
    primary_key: [user]
    buckets: 3
    columns: {region: {agg: last_value}, total: {agg: sum, from: amount}}
    changelog: {topic: %[5]s}
checkpoint: {interval: 70ms}
---
job: {name: regions, parallelism: 2}
source:
  - kafka: {brokers: [%[1]s], topics: [%[3]s], format: upsert-json, align: versions, fetch_max_bytes: 1KiB, schema: {user: string, region: string, total: int64}}
  - kafka: {brokers: [%[1]s], topics: [%[5]s], format: upsert-json, align: versions, fetch_max_bytes: 1KiB, schema: {user: string, region: string, total: int64}}
sink:
  table:
    name: region_totals
    primary_key: [region]
    buckets: 2
    columns:
      total: {agg: sum}
      users: {agg: count}
    changelog: {topic: %[4]s}
checkpoint: {interval: 10ms}
`

// TestAlignedUnion: B reads the union of two upstream tables' changelogs,
// aligned on both. Every version of B names the pair of upstream versions
// it holds, and B's rows there are the sum of the aggregates of both
// tables at exactly those versions.
func TestAlignedUnion(t *testing.T) {
	run := runChain(t, unionJobs, alignUsers, alignOrders, true)
	logs := map[string][]*kgo.Record{}
	ends := map[string]map[uint64][]int64{}
	for topic, vs := range map[string][]export.Version{run.aTopic: run.as, run.a2Topic: run.a2s} {
		logs[topic] = kafkatest.ConsumeStable(t, run.brokers, topic)
		ends[topic] = map[uint64][]int64{}
		for _, v := range vs {
			ends[topic][v.Version] = v.EndOffsets
		}
	}
	bLog := kafkatest.ConsumeStable(t, run.brokers, run.bTopic)
	pairs := 0
	for _, v := range run.bs {
		want := map[string][2]float64{}
		seen := map[string]bool{}
		for _, up := range v.Upstream {
			e, ok := ends[up.Topic][up.Version]
			if up.Version == 0 {
				e, ok = nil, true // none of it read whole
			}
			if !ok || seen[up.Topic] || !up.Exact {
				t.Fatalf("B's version %d names %+v: not a version of an upstream table, a second one of it, or not exact", v.Version, v.Upstream)
			}
			seen[up.Topic] = true
			for region, s := range regionAggregate(kafkatest.Replay(t, logs[up.Topic], e, false)) {
				w := want[region]
				want[region] = [2]float64{w[0] + s[0], w[1] + s[1]}
			}
		}
		if len(v.Upstream) == 2 && v.Upstream[0].Version > 0 && v.Upstream[1].Version > 0 {
			pairs++
		}
		if got := regionRows(kafkatest.Replay(t, bLog, v.EndOffsets, false)); !maps.Equal(got, want) {
			t.Fatalf("B's version %d (upstream %+v): %v; the aggregates of its upstream versions: %v", v.Version, v.Upstream, got, want)
		}
	}
	t.Logf("A: %d versions, A2: %d; B: %d versions, %d naming a pair", len(run.as), len(run.a2s), len(run.bs), pairs)
	if pairs < 5 {
		t.Fatalf("only %d of B's versions name both upstream tables", pairs)
	}
}
