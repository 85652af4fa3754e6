package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

var chain3KillsFlag = flag.Int("chain3-kills", 4, "SIGKILLs of each of the three runners in TestAbuseChain3SIGKILL (docs/CONSISTENCY.md: 30 for a long run)")

// chain3Interval is how often the reader of TestAbuseChain3SIGKILL reads.
const chain3Interval = 200 * time.Millisecond

// minUnderKills is how many consistent snapshots TestAbuseChain3SIGKILL's
// reader must take while the runners are being killed.
const minUnderKills = 5

// TestAbuseChain3SIGKILL runs the three jobs of examples/chained, A
// (orders → totals per user), B (A's changelog → per region, aligned on A's
// versions) and C (B's changelog → grand total, aligned on B's versions),
// each in a runner process of its own with its own data directory and
// Kafka (kfake, or the real one of EBBFLOW_KAFKA_BROKERS) as the only
// medium they share, and kills each of the three with SIGKILL -chain3-kills
// times at independent seeded random moments while orders keep arriving
// (more, while the reader has taken fewer than minUnderKills consistent
// snapshots; then orders without kills, while it has seen too few versions
// or no weak snapshot break the invariant). Throughout, a reader in the
// test process takes a consistent snapshot of the three tables from Kafka
// (export.ReadSnapshot) every 200 ms, and after every second one a weak
// one. Every consistent snapshot must hold the cross-table invariant
// exactly (B's rows are the aggregate of A's rows at the paired version,
// C's row the grand total of B's), with each version naming the one paired
// with it as its exact upstream, and no table's version going back from
// one snapshot to the next; the last one, once the input ended, must equal
// the exact aggregates of the whole input, as must one after a graceful
// stop. The bite: the weak reads (the newest version of each table) must
// break the invariant at least once under the same load, or the check
// proves nothing (counted once every table has rows: not merely B or C
// that has not started yet).
func TestAbuseChain3SIGKILL(t *testing.T) {
	ch := newChain(t)
	ch.b.args = append(ch.b.args, "--set", "source.kafka.align=versions", "--set", "checkpoint.interval=300ms")
	cLog := ch.addC(300 * time.Millisecond)
	cfg := export.SnapshotConfig{Kafka: kafka.Connection{Brokers: ch.brokers}, Topics: []string{ch.changelog, ch.bLog, cLog}}
	rd := startSnapshotReader(cfg)
	defer rd.close()
	kills := *chain3KillsFlag
	ch.crash(kills, kills, kills)
	// On a slow broker (the real one on a loaded machine: a read from
	// Kafka takes up to a second, a runner a few to start, a runner killed
	// in a transaction holds the reads for longer), the reader may have
	// taken few consistent snapshots by then: kill on, once more each a
	// round, until it took some (at most 10 rounds).
	for round := 0; round < 10 && rd.results().consistent < minUnderKills && rd.results().failure == ""; round++ {
		ch.crash(ch.a.kills+1, ch.b.kills+1, ch.c.kills+1)
	}
	duringKills := rd.results()
	if duringKills.failure != "" {
		t.Fatalf("seed %d: %s", ch.seed, duringKills.failure)
	}
	if duringKills.consistent < minUnderKills {
		t.Fatalf("seed %d: %d consistent snapshots while the runners were killed: the reader saw too little to prove anything", ch.seed, duringKills.consistent)
	}
	// It may also have seen few versions of C, or no weak snapshot that
	// breaks the invariant (the runners spent the time starting, and B and
	// C caught up with A): the input goes on, without kills, until it has
	// seen enough of both (at most a minute).
	for deadline := time.Now().Add(time.Minute); !rd.results().enough() && rd.results().failure == "" && time.Now().Before(deadline); {
		ch.produce(5 + ch.rng.Intn(30))
		time.Sleep(time.Duration(5+ch.rng.Intn(20)) * time.Millisecond)
		ch.running()
	}

	// The last orders, then the reader's consistent snapshot must come to
	// hold the whole input.
	ch.produce(300)
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := rd.results()
		if r.failure != "" {
			t.Fatalf("seed %d: %s", ch.seed, r.failure)
		}
		d := "no consistent snapshot yet"
		if r.newest != nil {
			d = ch.diffChain3(r.newest)
		}
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("seed %d: no consistent snapshot holds the whole input after 90 s: %s", ch.seed, d)
		}
		ch.running()
		time.Sleep(chain3Interval)
	}
	rd.close()
	r := rd.results()
	if r.failure != "" {
		t.Fatalf("seed %d: %s", ch.seed, r.failure)
	}
	t.Logf("seed %d: A, B and C killed %d, %d and %d times; %d consistent snapshots, all exact (%d versions of C among them; %d reads before the first had none; %d taken while the kills went on, at %d versions of C); %d of %d weak snapshots broke the invariant (%d of %d while the kills went on), the first: %s",
		ch.seed, ch.a.kills, ch.b.kills, ch.c.kills, r.consistent, r.cVersions, r.none, duringKills.consistent, duringKills.cVersions,
		r.weakBroken, r.weak, duringKills.weakBroken, duringKills.weak, r.firstWeakBreak)
	slices.Sort(r.took)
	t.Logf("a consistent snapshot of the three tables from Kafka took %s (median), %s at most", r.took[len(r.took)/2], r.took[len(r.took)-1])
	if r.consistent < 10 || r.cVersions < 5 {
		t.Fatalf("seed %d: %d consistent snapshots at %d versions of C: the reader saw too little to prove anything", ch.seed, r.consistent, r.cVersions)
	}
	if r.weakBroken == 0 {
		t.Fatalf("seed %d: none of %d weak snapshots broke the invariant: the check cannot tell a consistent read from a weak one", ch.seed, r.weak)
	}

	ch.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := export.ReadSnapshot(ctx, cfg)
	if err != nil {
		t.Fatalf("seed %d: after a graceful stop: %v", ch.seed, err)
	}
	if d := chain3Broken(s); d != "" {
		t.Fatalf("seed %d: after a graceful stop: %s", ch.seed, d)
	}
	if d := ch.diffChain3(s); d != "" {
		t.Fatalf("seed %d: after a graceful stop: %s", ch.seed, d)
	}
}

// diffChain3 compares a snapshot of A, B and C with the exact aggregates
// of the input produced so far ("" when equal).
func (ch *chain) diffChain3(s *export.Snapshot) string {
	if d := ch.diffA(rowsBy(s.Tables[0].Rows, "user")); d != "" {
		return fmt.Sprintf("A at version %d: %s", s.Tables[0].Version.Version, d)
	}
	if d := ch.diffB(rowsBy(s.Tables[1].Rows, "region")); d != "" {
		return fmt.Sprintf("B at version %d: %s", s.Tables[1].Version.Version, d)
	}
	var want grandSum
	for _, u := range ch.users {
		want.total += u.total
		want.users++
	}
	if got := grandOf(rowsBy(s.Tables[2].Rows, "scope")); got != want {
		return fmt.Sprintf("C at version %d: %+v, want %+v", s.Tables[2].Version.Version, got, want)
	}
	return ""
}

// grandSum is C's row: the sum of B's totals and users.
type grandSum struct{ total, users int64 }

// grandOf reads C's table, absent or one row "all" (another row counts as
// none: the invariant then breaks).
func grandOf(cRows map[string]map[string]any) grandSum {
	if len(cRows) > 1 {
		return grandSum{-1, -1}
	}
	r := cRows["all"]
	return grandSum{jsonInt(r["total"]), jsonInt(r["users"])}
}

// chain3Broken says how a snapshot of A, B and C breaks the cross-table
// invariant ("" when it holds): B's rows are the aggregate per region of
// A's rows, and C's row the grand total of B's rows.
func chain3Broken(s *export.Snapshot) string {
	a, b, c := s.Tables[0], s.Tables[1], s.Tables[2]
	bRows := rowsBy(b.Rows, "region")
	if got, want := regionRowsOf(bRows), regionsOf(rowsBy(a.Rows, "user")); !maps.Equal(got, want) {
		return fmt.Sprintf("B at version %d: %v; the aggregate of A at version %d: %v", b.Version.Version, got, a.Version.Version, want)
	}
	var want grandSum
	for _, r := range bRows {
		want.total += jsonInt(r["total"])
		want.users += jsonInt(r["users"])
	}
	if got := grandOf(rowsBy(c.Rows, "scope")); got != want {
		return fmt.Sprintf("C at version %d: %+v; the grand total of B at version %d: %+v", c.Version.Version, got, b.Version.Version, want)
	}
	return ""
}

// unpaired says how the versions of a consistent snapshot of A → B → C
// fail to pair up ("" when B's names A's as its exact upstream, and C's
// B's; an older number with the same rows counts: ChooseVersions reports
// the newest of versions that hold the same).
func unpaired(s *export.Snapshot) string {
	for i := 1; i < len(s.Tables); i++ {
		up, v := s.Tables[i-1], s.Tables[i].Version
		if len(v.Upstream) != 1 || v.Upstream[0].Topic != up.Topic || !v.Upstream[0].Exact || v.Upstream[0].Version > up.Version.Version {
			return fmt.Sprintf("%s's version %d names %+v, paired with version %d of %s", s.Tables[i].Topic, v.Version, v.Upstream, up.Version.Version, up.Topic)
		}
	}
	return ""
}

// rowsBy returns a snapshot table's rows by the value of column key.
func rowsBy(rows export.Rows, key string) map[string]map[string]any {
	out := map[string]map[string]any{}
	err := rows.Each(func(_ string, r kafka.Row) error {
		m := r.Map()
		out[fmt.Sprint(m[key])] = m
		return nil
	})
	if err != nil {
		// These rows are read from the changelogs: they are a map.
		panic(fmt.Sprintf("rows of a changelog: %v", err))
	}
	return out
}

// snapshotReader reads the tables of cfg, a consistent snapshot every
// chain3Interval and after every second one a weak one, until closed, and
// checks each (see TestAbuseChain3SIGKILL). Its goroutine stops at the
// first failure.
type snapshotReader struct {
	cfg    export.SnapshotConfig
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu struct {
		sync.Mutex
		r readerResults
	}
}

// readerResults is what a snapshotReader found so far.
type readerResults struct {
	failure        string           // the first failure ("": none)
	newest         *export.Snapshot // the last consistent snapshot
	consistent     int              // consistent snapshots taken
	none           int              // consistent reads that found no set, before the first
	cVersions      int              // distinct versions of the last table among them
	weak           int              // weak snapshots taken with rows in every table
	weakBroken     int              // those that broke the invariant
	firstWeakBreak string
	took           []time.Duration // per consistent snapshot, how long it took
}

// enough says whether the reader took enough consistent snapshots, at
// enough versions of the last table, for the test to prove something, and
// saw a weak one break the invariant.
func (r readerResults) enough() bool {
	return r.consistent >= 10 && r.cVersions >= 5 && r.weakBroken > 0
}

func startSnapshotReader(cfg export.SnapshotConfig) *snapshotReader {
	ctx, cancel := context.WithCancel(context.Background())
	rd := &snapshotReader{cfg: cfg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rd.done)
		rd.run(ctx)
	}()
	return rd
}

// close stops the reader and waits for it.
func (rd *snapshotReader) close() {
	rd.once.Do(rd.cancel)
	<-rd.done
}

func (rd *snapshotReader) results() readerResults {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.mu.r
}

func (rd *snapshotReader) run(ctx context.Context) {
	tick := time.NewTicker(chain3Interval)
	defer tick.Stop()
	last := make([]uint64, len(rd.cfg.Topics))
	for n := 0; ; n++ {
		ok := rd.readConsistent(ctx, last)
		if ok && n%2 == 1 {
			ok = rd.readWeak(ctx)
		}
		if !ok {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readConsistent takes and checks a consistent snapshot; last holds the
// versions of the one before, and gets this one's. It returns false once
// the reader failed or is closed.
func (rd *snapshotReader) readConsistent(ctx context.Context, last []uint64) bool {
	began := time.Now()
	s, err := export.ReadSnapshot(ctx, rd.cfg)
	if ctx.Err() != nil {
		return false
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	r := &rd.mu.r
	r.took = append(r.took, time.Since(began))
	switch {
	case err != nil && r.consistent == 0 && (errors.Is(err, export.ErrInconsistent) || strings.Contains(err.Error(), "no versions yet")):
		r.none++
		return true
	case err != nil:
		r.failure = fmt.Sprintf("consistent snapshot %d: %v", r.consistent+1, err)
		return false
	}
	d := chain3Broken(s)
	if d == "" {
		d = unpaired(s)
	}
	for i, ts := range s.Tables {
		if ts.Version.Version < last[i] && d == "" {
			d = fmt.Sprintf("%s at version %d after %d", ts.Topic, ts.Version.Version, last[i])
		}
	}
	if d != "" {
		r.failure = fmt.Sprintf("consistent snapshot %d: %s", r.consistent+1, d)
		return false
	}
	if c := len(last) - 1; r.consistent == 0 || s.Tables[c].Version.Version != last[c] {
		r.cVersions++
	}
	for i, ts := range s.Tables {
		last[i] = ts.Version.Version
	}
	r.consistent++
	r.newest = s
	return true
}

// readWeak takes a weak snapshot and counts it if every table has rows,
// as broken if it breaks the invariant. It returns false once the reader
// failed or is closed.
func (rd *snapshotReader) readWeak(ctx context.Context) bool {
	cfg := rd.cfg
	cfg.Weak = true
	s, err := export.ReadSnapshot(ctx, cfg)
	if ctx.Err() != nil {
		return false
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	r := &rd.mu.r
	switch {
	case err != nil && strings.Contains(err.Error(), "no versions yet"):
		return true
	case err != nil:
		r.failure = fmt.Sprintf("weak snapshot %d: %v", r.weak+1, err)
		return false
	case slices.ContainsFunc(s.Tables, func(ts export.TableSnapshot) bool { return ts.Rows.Len() == 0 }):
		return true
	}
	r.weak++
	if d := chain3Broken(s); d != "" {
		if r.weakBroken == 0 {
			r.firstWeakBreak = d
		}
		r.weakBroken++
	}
	return true
}
