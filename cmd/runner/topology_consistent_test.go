package main

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// TestTopologyConsistentFreshness: in a → b, b's newest version is not
// aligned (it holds a's newest and maybe part of the next) and a is past
// the version b's last exact version is derived from. Each table's
// freshness is that of its newest version; the consistent version of the
// part {a, b} is a's 2 and b's 2, and its freshness is now minus their
// event time, not minus either table's newest. A table of another part
// (x, without event time) neither holds it back nor is given one.
func TestTopologyConsistentFreshness(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	aCL, bCL, xCL := kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	writer := func(job string, ckpt uint64) []changelogfmt.WriterCheckpoint {
		return []changelogfmt.WriterCheckpoint{{Writer: job + "/table#0", Job: job, Checkpoint: ckpt}}
	}
	upA := func(n uint64, exact bool) []changelogfmt.UpstreamVersion {
		return []changelogfmt.UpstreamVersion{{Table: "a", Topic: aCL, Version: n, Exact: exact}}
	}
	versions := []changelogfmt.Version{
		{Table: "a", Topic: aCL, Version: 1, EndOffsets: []int64{3}, Writers: writer("A", 1), EventTimeMs: ms(time.Second)},
		{Table: "a", Topic: aCL, Version: 2, EndOffsets: []int64{6}, Writers: writer("A", 2), EventTimeMs: ms(2 * time.Second)},
		{Table: "a", Topic: aCL, Version: 3, EndOffsets: []int64{9}, Writers: writer("A", 3), EventTimeMs: ms(3 * time.Second)},
		{Table: "a", Topic: aCL, Version: 4, EndOffsets: []int64{12}, Writers: writer("A", 4), EventTimeMs: ms(4 * time.Second)},
		{Table: "b", Topic: bCL, Version: 1, EndOffsets: []int64{1}, Writers: writer("B", 1), Upstream: upA(1, true), EventTimeMs: ms(time.Second)},
		{Table: "b", Topic: bCL, Version: 2, EndOffsets: []int64{2}, Writers: writer("B", 2), Upstream: upA(2, true), EventTimeMs: ms(2 * time.Second)},
		{Table: "b", Topic: bCL, Version: 3, EndOffsets: []int64{4}, Writers: writer("B", 3), Upstream: upA(3, false), EventTimeMs: ms(3 * time.Second)},
		{Table: "x", Topic: xCL, Version: 7, EndOffsets: []int64{1}, Writers: writer("X", 9)},
	}
	for _, topic := range []string{aCL, bCL, xCL} {
		kafkatest.CreateTopic(t, brokers, changelogfmt.VersionsTopic(topic), 1)
	}
	produceVersions(t, brokers, versions, t0)

	now := t0.Add(time.Hour)
	top, err := readTopology(context.Background(), nil, &kafka.Connection{Brokers: brokers}, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]topoTable{}
	for _, tt := range top.Tables {
		tables[tt.Changelog] = tt
	}
	near := func(got *float64, want time.Duration) bool { return got != nil && math.Abs(*got-want.Seconds()) < 1e-6 }
	for topic, w := range map[string]struct {
		newest, consistent uint64
		fresh, cFresh      time.Duration
	}{
		aCL: {newest: 4, consistent: 2, fresh: time.Hour - 4*time.Second, cFresh: time.Hour - 2*time.Second},
		bCL: {newest: 3, consistent: 2, fresh: time.Hour - 3*time.Second, cFresh: time.Hour - 2*time.Second},
	} {
		tt, ok := tables[topic]
		if !ok || tt.Version == nil || tt.Version.Version != w.newest || !near(tt.FreshnessSeconds, w.fresh) {
			t.Fatalf("table %s: %+v; want newest version %d, freshness %v", topic, tt, w.newest, w.fresh)
		}
		if tt.ConsistentVersion == nil || *tt.ConsistentVersion != w.consistent || !near(tt.ConsistentFreshnessSeconds, w.cFresh) {
			t.Fatalf("table %s: consistent version %v, freshness %v; want %d, %v", topic, tt.ConsistentVersion, tt.ConsistentFreshnessSeconds, w.consistent, w.cFresh)
		}
	}
	if x := tables[xCL]; x.ConsistentVersion == nil || *x.ConsistentVersion != 7 || x.ConsistentFreshnessSeconds != nil {
		t.Fatalf("table x: consistent version %v, freshness %v; want 7 and unknown", x.ConsistentVersion, x.ConsistentFreshnessSeconds)
	}
	var part *topoConsistent
	for i, c := range top.Consistent {
		for _, id := range c.Tables {
			if id == tables[aCL].ID {
				part = &top.Consistent[i]
			}
		}
	}
	if part == nil || len(part.Tables) != 2 || part.Error != "" || part.EventTime == nil || !part.EventTime.Equal(t0.Add(2*time.Second)) ||
		!near(part.FreshnessSeconds, time.Hour-2*time.Second) {
		t.Fatalf("the part of a: %+v; want a and b at event time %s", part, t0.Add(2*time.Second))
	}

	// The same, read again with readers kept across reads (the runner's):
	// a's newer version 5, which b's version 4 is derived from exactly,
	// moves the consistent version on.
	readers, err := export.NewVersionsReaders(kafka.Connection{Brokers: brokers}, topologyKept)
	if err != nil {
		t.Fatal(err)
	}
	defer readers.Close()
	if _, err := readTopology(context.Background(), nil, &kafka.Connection{Brokers: brokers}, readers, now); err != nil {
		t.Fatal(err)
	}
	more := []changelogfmt.Version{
		{Table: "a", Topic: aCL, Version: 5, EndOffsets: []int64{15}, Writers: writer("A", 5), EventTimeMs: ms(5 * time.Second)},
		{Table: "b", Topic: bCL, Version: 4, EndOffsets: []int64{5}, Writers: writer("B", 4), Upstream: upA(5, true), EventTimeMs: ms(5 * time.Second)},
	}
	produceVersions(t, brokers, more, t0)
	top, err = readTopology(context.Background(), nil, &kafka.Connection{Brokers: brokers}, readers, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range top.Tables {
		if (tt.Changelog == aCL || tt.Changelog == bCL) &&
			(tt.ConsistentVersion == nil || *tt.ConsistentVersion != map[string]uint64{aCL: 5, bCL: 4}[tt.Changelog] ||
				!near(tt.ConsistentFreshnessSeconds, time.Hour-5*time.Second)) {
			t.Fatalf("after a's 5 and b's 4: table %s at consistent version %v, freshness %v", tt.Table, tt.ConsistentVersion, tt.ConsistentFreshnessSeconds)
		}
	}
}

// produceVersions writes vs, committed at t0, to their tables' versions
// topics.
func produceVersions(t *testing.T, brokers []string, vs []changelogfmt.Version, t0 time.Time) {
	t.Helper()
	var recs []*kgo.Record
	for i := range vs {
		v := &vs[i]
		v.Format, v.TableID, v.CommitTime = changelogfmt.VersionFormat, v.Table+"-id", t0
		r, err := changelogfmt.VersionRecord(changelogfmt.VersionsTopic(v.Topic), v, 1000)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	kafkatest.Produce(t, brokers, recs...)
}
