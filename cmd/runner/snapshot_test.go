package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
)

// snapshotJSON runs `runner snapshot -o json` with args; ok is false when it
// exits 1 saying there is no consistent set (yet) or no versions (yet).
func snapshotJSON(t *testing.T, args ...string) (snapshotOut, bool) {
	t.Helper()
	out, stderr, code := runCLIErr(t, nil, append([]string{"snapshot", "-o", "json"}, args...)...)
	var s snapshotOut
	switch {
	case code == 1 && (strings.Contains(stderr, "no consistent set of versions") || strings.Contains(stderr, "has no versions yet")):
		return s, false
	case code != 0:
		t.Fatalf("runner snapshot %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("runner snapshot: %v: %s", err, out)
	}
	return s, true
}

// byColumn is a snapshot table's rows by the value of column key.
func byColumn(t snapshotTableOut, key string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, r := range t.Rows {
		m := r.Map()
		out[fmt.Sprint(m[key])] = m
	}
	return out
}

// TestSnapshotCommand runs A → B of examples/chained as two runner
// processes (B with a changelog of its own), on kfake or the real Kafka of
// EBBFLOW_KAFKA_BROKERS, feeds A a burst of orders and reads both tables
// with `runner snapshot`, from Kafka and through A's runner. Every
// consistent snapshot holds B's rows equal to the aggregate of A's rows it
// shows; once B has read the burst, A's equal the input's exact totals; a
// weak one says it is weak.
func TestSnapshotCommand(t *testing.T) {
	ch := newChain(t)
	bTopic := ch.bLog
	ch.b.args = append(ch.b.args, "--set", "checkpoint.interval=200ms")
	for _, r := range []*jobProc{ch.a, ch.b} {
		r.c = start(t, r.env, append(r.args, "--data-dir", r.dir)...)
	}
	ch.produce(200)
	brokers := strings.Join(ch.brokers, ",")
	// check: B's rows are the aggregate of A's rows in the snapshot.
	check := func(s snapshotOut) {
		t.Helper()
		if !s.Consistent || s.Mode != "consistent" || len(s.Tables) != 2 {
			t.Fatalf("snapshot %+v: not a consistent one of two tables", s)
		}
		want := map[string]regionSum{}
		for _, u := range byColumn(s.Tables[0], "user") {
			r := want[fmt.Sprint(u["region"])]
			want[fmt.Sprint(u["region"])] = regionSum{total: r.total + num(u["total"]), users: r.users + 1}
		}
		got := map[string]regionSum{}
		for region, r := range byColumn(s.Tables[1], "region") {
			if rs := (regionSum{total: num(r["total"]), users: num(r["users"])}); rs != (regionSum{}) {
				got[region] = rs
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("B at version %d: %v; the aggregate of A at version %d: %v", s.Tables[1].Version.Version, got, s.Tables[0].Version.Version, want)
		}
	}
	var last [2]uint64
	waitFor(t, ch.a.c, 2*time.Minute, "a consistent snapshot of the whole input", func() bool {
		s, ok := snapshotJSON(t, "--brokers", brokers, "--tables", ch.changelog+","+bTopic)
		if !ok {
			return false
		}
		check(s)
		for i, ts := range s.Tables {
			if ts.Version.Version < last[i] || ts.Source != "changelog" {
				t.Fatalf("%s at version %d (from the %s) after %d", ts.Topic, ts.Version.Version, ts.Source, last[i])
			}
			last[i] = ts.Version.Version
		}
		return ch.diffA(byColumn(s.Tables[0], "user")) == "" && ch.diffB(byColumn(s.Tables[1], "region")) == ""
	})

	// Through A's runner: its table user_totals from the table itself, B's
	// from its changelog.
	s, ok := snapshotJSON(t, "--data-dir", ch.a.dir, "--tables", "user_totals,"+bTopic)
	if !ok {
		t.Fatal("no consistent snapshot through A's runner")
	}
	check(s)
	if s.Tables[0].Table != "user_totals" || s.Tables[0].Source != "table" || s.Tables[1].Source != "changelog" || ch.diffA(byColumn(s.Tables[0], "user")) != "" {
		t.Fatalf("snapshot through A's runner: %+v", s)
	}
	// The table output, and a weak read.
	out, code := runCLI(t, nil, "snapshot", "--brokers", brokers, "--tables", ch.changelog+","+bTopic)
	if code != 0 || !strings.HasPrefix(out, "snapshot: consistent") || !strings.Contains(out, "table user_totals  topic "+ch.changelog) {
		t.Fatalf("snapshot: exit %d:\n%s", code, out)
	}
	out, code = runCLI(t, nil, "snapshot", "--brokers", brokers, "--tables", ch.changelog+","+bTopic, "--weak")
	if code != 0 || !strings.HasPrefix(out, "snapshot: WEAK") {
		t.Fatalf("weak snapshot: exit %d:\n%s", code, out)
	}
	if s, ok := snapshotJSON(t, "--brokers", brokers, "--tables", ch.changelog+","+bTopic, "--weak"); !ok || s.Consistent || s.Mode != "weak" {
		t.Fatalf("weak snapshot: %+v", s)
	}
	ch.stop()
}

// TestSnapshotNoConsistentSet: versions that were not cut on their
// upstream's version boundaries give no consistent set: `runner snapshot`
// exits 1 saying why; --weak reads them, saying so; bad usage exits 2.
func TestSnapshotNoConsistentSet(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	a, b := kafkatest.NewTopic(t, brokers, 1), kafkatest.NewTopic(t, brokers, 1)
	var recs []*kgo.Record
	for _, v := range []changelogfmt.Version{
		{Table: "a", Topic: a, Version: 1, EndOffsets: []int64{0}},
		{Table: "b", Topic: b, Version: 1, EndOffsets: []int64{0}, Upstream: []changelogfmt.UpstreamVersion{{Table: "a", Topic: a, Version: 1}}},
	} {
		kafkatest.CreateTopic(t, brokers, changelogfmt.VersionsTopic(v.Topic), 1)
		r, err := changelogfmt.VersionRecord(changelogfmt.VersionsTopic(v.Topic), &v, 1000)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	kafkatest.Produce(t, brokers, recs...)
	list := strings.Join(brokers, ",")
	_, stderr, code := runCLIErr(t, nil, "snapshot", "--brokers", list, "--tables", a+","+b)
	if code != exitFailure || !strings.Contains(stderr, `version 1 of "`+b+`" holds all of version 1 of "`+a+`" and maybe part of the next`) {
		t.Fatalf("snapshot: exit %d: %s; want 1 saying b's version is not aligned", code, stderr)
	}
	out, code := runCLI(t, nil, "snapshot", "--brokers", list, "--tables", a+","+b, "--weak")
	if code != 0 || !strings.HasPrefix(out, "snapshot: WEAK") {
		t.Fatalf("weak snapshot: exit %d:\n%s", code, out)
	}
	for _, args := range [][]string{{"snapshot", "--brokers", list}, {"snapshot", "--tables", a, "-o", "csv"}} {
		if _, code := runCLI(t, nil, args...); code != exitUsage {
			t.Errorf("runner %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}
}
