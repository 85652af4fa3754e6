package repartition

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// TestHandoverRebuild moves every bucket of a scaled job from one owner to
// two new ones (a restart with another instance count, on new machines:
// fresh data directories). Owner A (instance 0 of 1) applies input and
// publishes its checkpoints to the owner log; it dies without a final
// checkpoint while its log holds entries past its last completed one
// (applied, never published). More input arrives while nobody owns the buckets. B0
// and B1 (instances 0 and 1 of 2) take their partitions over: each rebuilds
// its buckets from the owner log, resumes the repartition partitions at the
// sealed offsets (so A's unpublished work is applied again, once), and
// applies the rest. Their tables together equal the exact totals; a third
// owner rebuilding every bucket from the owner log alone gets the exact
// totals too; and the owner log's epochs show no partition applied by two
// owners at once.
func TestHandoverRebuild(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-seed %d repeats the input)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	brokers := kafkatest.Brokers(t)
	in := kafkatest.NewTopic(t, brokers, scaleInput)
	topic := kafkatest.TopicName(t, brokers)
	want := make(totals)
	kafkatest.Produce(t, brokers, input(rng, in, 0, 1500, want)...)

	a := startOwner(t, brokers, in, topic, 0, 1)
	for _, h := range a.handovers {
		if h.Epoch != 1 || h.Rebuilt != 0 || h.Resume != 0 {
			t.Fatalf("A took partition %d at epoch %d, rebuilt %d rows, resumes at %d: want epoch 1 of an empty owner log", h.Partition, h.Epoch, h.Rebuilt, h.Resume)
		}
	}
	kafkatest.Produce(t, brokers, input(rng, in, 1500, 600, want)...)
	waitTotals(t, []*instance{a}, want)
	waitCheckpoint(t, a) // a checkpoint with all of it, to publish
	// A dies while its log holds entries that no completed checkpoint
	// covers: they are never published.
	seq := 2100
	deadline := time.Now().Add(kafkatest.Timeout)
	for !uncommitted(t, a.table) {
		if time.Now().After(deadline) {
			t.Fatal("stage 2 never wrote past its last completed checkpoint")
		}
		kafkatest.Produce(t, brokers, input(rng, in, seq, 50, want)...)
		seq += 50
		time.Sleep(5 * time.Millisecond)
	}
	a.kill2() // no final checkpoint
	<-a.done2
	a.stop1()
	if err := <-a.done1; err != nil {
		t.Fatalf("A's stage 1: %v", err)
	}
	a.stopPublishers(t) // publishes up to A's last completed checkpoint
	kafkatest.Produce(t, brokers, input(rng, in, seq, 300, want)...)
	seq += 300

	bs := []*instance{startOwner(t, brokers, in, topic, 0, 2), startOwner(t, brokers, in, topic, 1, 2)}
	rebuilt := 0
	for n, b := range bs {
		for _, h := range b.handovers {
			t.Logf("B%d took partition %d at epoch %d: read %d owner-log records, rebuilt %d rows, resumes at %d", n, h.Partition, h.Epoch, h.Read, h.Rebuilt, h.Resume)
			if h.Epoch != 2 {
				t.Errorf("B%d took partition %d at epoch %d, want 2", n, h.Partition, h.Epoch)
			}
			rebuilt += h.Rebuilt
		}
	}
	if rebuilt == 0 {
		t.Fatal("the new owners rebuilt no rows")
	}
	kafkatest.Produce(t, brokers, input(rng, in, seq, 300, want)...)
	waitTotals(t, bs, want)
	for _, b := range bs {
		b.stop(t)
	}
	if d := diff(union(t, bs, true), want); d != "" {
		t.Fatalf("after the stop: %s", d)
	}

	// The owner log alone holds the exact table.
	c := freshTable(t)
	for p := range int32(scaleBuckets) {
		h, err := Take(t.Context(), ownerConfig(brokers, topic, 9), c, p)
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
		if h.Epoch != 3 {
			t.Errorf("C took partition %d at epoch %d, want 3", p, h.Epoch)
		}
	}
	if d := diff(union(t, []*instance{{table: c}}, false), want); d != "" {
		t.Fatalf("rebuilt from the owner log alone: %s", d)
	}
	if err := CheckOwners(t.Context(), kafka.Connection{Brokers: brokers}, topic, scaleBuckets, 2); err != nil {
		t.Fatal(err)
	}
	checkChangelog(t, brokers, topic, want)
}

func freshTable(t testing.TB) *aggmerge.Table {
	table, err := aggmerge.Open(filepath.Join(t.TempDir(), "totals"), scaleSchema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = table.Close() })
	return table
}

// sealRow publishes one row of partition 0 and a seal, as a Publisher
// does at a commit marker.
func sealRow(ctx context.Context, h *Handover, table *aggmerge.Table, user string, total int64) error {
	key, err := table.EncodeKey([]agg.Value{agg.StringValue(user)})
	if err != nil {
		return err
	}
	v, err := appendImage(nil, h.Epoch, []agg.Value{agg.IntValue(total), agg.IntValue(total)})
	if err != nil {
		return err
	}
	off, err := h.commit(ctx, []*kgo.Record{{Key: key, Value: v}}, nil,
		Seal{Owner: h.cfg.Owner, Epoch: h.Epoch, BasedOn: h.last, Resume: h.Resume + 1, Checkpoint: 1, Table: table.ID()})
	if err == nil {
		h.last = off
	}
	return err
}

// userOf returns the nth user (from 0) whose bucket is 0.
func userOf(t *testing.T, table *aggmerge.Table, nth int) string {
	for i := 0; ; i++ {
		u := "u" + strconv.Itoa(i)
		if b, err := table.Bucket([]agg.Value{agg.StringValue(u)}); err != nil {
			t.Fatal(err)
		} else if b == 0 && nth == 0 {
			return u
		} else if b == 0 {
			nth--
		}
	}
}

// TestHandoverTwoOwners: owner A holds partition 0 and is still running
// when owner B takes it over. With the transactional id per partition (the
// design) B's Take fences A: A's next publish fails with PRODUCER_FENCED and
// the owner log passes CheckOwners. The bite: with a transactional id per
// owner (no fencing), A's publish after B's claim commits, and CheckOwners
// catches the partition applied by two owners at once.
func TestHandoverTwoOwners(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		name := map[bool]string{true: "fenced", false: "unfenced"}[fenced]
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			brokers := kafkatest.Brokers(t)
			topic := kafkatest.TopicName(t, brokers)
			ta, tb := freshTable(t), freshTable(t)
			ca, cb := ownerConfig(brokers, topic, 0), ownerConfig(brokers, topic, 1)
			if !fenced {
				ca.TransactionalID, cb.TransactionalID = topic+"-a", topic+"-b"
			}
			user := userOf(t, ta, 0)
			ha, err := Take(ctx, ca, ta, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer ha.Close()
			if err := sealRow(ctx, ha, ta, user, 1); err != nil {
				t.Fatal(err)
			}
			hb, err := Take(ctx, cb, tb, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer hb.Close()
			if hb.Epoch != 2 || hb.Rebuilt != 1 || hb.Resume != 1 {
				t.Fatalf("B took over at epoch %d with %d rows, resuming at %d: want epoch 2, 1 row, at 1", hb.Epoch, hb.Rebuilt, hb.Resume)
			}
			err = sealRow(ctx, ha, ta, user, 2) // A, a zombie, publishes on
			conn := kafka.Connection{Brokers: brokers}
			check := CheckOwners(ctx, conn, topic, scaleBuckets, 2)
			if fenced {
				if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
					t.Fatalf("the zombie's publish: %v, want PRODUCER_FENCED", err)
				}
				if check != nil {
					t.Fatal(check)
				}
				return
			}
			if err != nil {
				t.Fatalf("the unfenced zombie's publish: %v", err)
			}
			if !errors.Is(check, ErrTwoOwners) {
				t.Fatalf("CheckOwners = %v, want ErrTwoOwners", check)
			}
			t.Logf("caught: %v", check)
			// A new owner's handover checks the chain too.
			if _, err := Take(ctx, cb, freshTable(t), 0); !errors.Is(err, ErrTwoOwners) {
				t.Fatalf("Take after two owners: %v, want ErrTwoOwners", err)
			}
		})
	}
}

// TestHandoverAfterUnclaimedRebuild: a handover that crashed between its
// rebuild and its claim left rows in the bucket (here a row the owner log
// no longer has); the retried Take clears them and rebuilds, so the bucket
// holds exactly the owner log's rows.
func TestHandoverAfterUnclaimedRebuild(t *testing.T) {
	ctx := t.Context()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.TopicName(t, brokers)
	ta, tb := freshTable(t), freshTable(t)
	ca, cb := ownerConfig(brokers, topic, 0), ownerConfig(brokers, topic, 1)
	user := userOf(t, ta, 0)
	ha, err := Take(ctx, ca, ta, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	if err := sealRow(ctx, ha, ta, user, 5); err != nil {
		t.Fatal(err)
	}
	gone := userOf(t, tb, 1)
	stale, err := tb.EncodeKey([]agg.Value{agg.StringValue(gone)})
	if err != nil {
		t.Fatal(err)
	}
	crashed := &Handover{cfg: cb, Partition: 0}
	if _, err := crashed.rebuild(tb, map[string][]agg.Value{string(stale): {agg.IntValue(7), agg.IntValue(7)}}); err != nil {
		t.Fatal(err)
	}
	hb, err := Take(ctx, cb, tb, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	got := make(totals)
	(&instance{table: tb}).scan(t, got, false)
	if d := diff(got, totals{user: {5, 5}}); d != "" {
		t.Fatalf("after the retried handover: %s", d)
	}
}

// TestHandoverRestartSameOwner: an owner's stage 2 dies while it applies
// (without a final checkpoint, with entries in its log past its last
// completed checkpoint, so that its restart undoes them) and the owner
// starts again on its data directory, up to 10 times until a restart undid
// some. Each Take finds the last seal is its own table's: it rebuilds
// nothing and claims the next epoch; stage 2 restores, undoes and replays;
// the Publisher goes on from the seal, dropping the rolled-back range. The
// table equals the exact totals, and so does a rebuild from the owner log
// alone.
func TestHandoverRestartSameOwner(t *testing.T) {
	brokers, in, topic, want, produce := seededInput(t)
	produce(1500)
	a := startOwner(t, brokers, in, topic, 0, 1)
	waitTotals(t, []*instance{a}, want)
	for round := 1; ; round++ {
		// Input arrives until the log holds entries past the last commit
		// marker; then stage 2 dies.
		deadline := time.Now().Add(kafkatest.Timeout)
		for !uncommitted(t, a.table) {
			if time.Now().After(deadline) {
				t.Fatal("stage 2 never wrote past its last completed checkpoint")
			}
			produce(50)
			time.Sleep(5 * time.Millisecond)
		}
		a.kill2()
		<-a.done2
		a.stop1()
		if err := <-a.done1; err != nil {
			t.Fatalf("stage 1: %v", err)
		}
		a.stopPublishers(t)
		for _, h := range a.handovers {
			h.Close()
		}
		if err := a.table.Close(); err != nil {
			t.Fatal(err)
		}
		before := undone(t, nil, a.dir)
		a = start(t, brokers, in, topic, 0, 1, a.dir, true)
		for _, h := range a.handovers {
			if h.Epoch != uint64(round+1) || h.Rebuilt != 0 {
				t.Errorf("round %d: the restarted owner took partition %d at epoch %d, rebuilding %d rows: want epoch %d, none rebuilt",
					round, h.Partition, h.Epoch, h.Rebuilt, round+1)
			}
		}
		waitTotals(t, []*instance{a}, want)
		n := undone(t, a.table, "")
		t.Logf("round %d: the restart undid %d log entries", round, n-before)
		if n > before {
			break
		}
		if round == 10 {
			t.Fatal("no restart in 10 undid anything: the test did not test undo")
		}
	}
	produce(300)
	waitTotals(t, []*instance{a}, want)
	a.stop(t)

	c := freshTable(t)
	for p := range int32(scaleBuckets) {
		h, err := Take(t.Context(), ownerConfig(brokers, topic, 9), c, p)
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	if d := diff(union(t, []*instance{{table: c}}, false), want); d != "" {
		t.Fatalf("rebuilt from the owner log alone: %s", d)
	}
	if err := CheckOwners(t.Context(), kafka.Connection{Brokers: brokers}, topic, scaleBuckets, 2); err != nil {
		t.Fatal(err)
	}
	checkChangelog(t, brokers, topic, want)
}

// uncommitted tells whether some bucket's log ends with a change, not a
// marker: entries that no completed checkpoint covers yet.
func uncommitted(t *testing.T, table *aggmerge.Table) bool {
	for b := range scaleBuckets {
		start, end, err := table.LogOffsets(b)
		if err != nil {
			t.Fatal(err)
		}
		if end == 0 {
			continue
		}
		last := aggmerge.MarkerEntry
		err = table.ReadLogWith(b, max(start, end-1), aggmerge.LogRead{Reuse: true}, func(e *aggmerge.Entry) error {
			last = e.Op
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if last != aggmerge.MarkerEntry {
			return true
		}
	}
	return false
}

// undone counts the undo entries (not markers) in a table's logs; with
// table nil, of the closed table of the data directory dir.
func undone(t *testing.T, table *aggmerge.Table, dir string) int {
	if table == nil {
		var err error
		if table, err = aggmerge.Open(filepath.Join(dir, "tables", "totals"), scaleSchema(), aggmerge.Options{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := table.Close(); err != nil {
				t.Error(err)
			}
		}()
	}
	n := 0
	for b := range scaleBuckets {
		start, _, err := table.LogOffsets(b)
		if err == nil {
			err = table.ReadLog(b, start, func(e *aggmerge.Entry) error {
				if e.Undo && e.Op != aggmerge.MarkerEntry {
					n++
				}
				return nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// checkChangelog fails unless the changelog the Publishers wrote replays
// to want, each before-image the row replayed so far (changelogRows).
func checkChangelog(t *testing.T, brokers []string, topic string, want totals) {
	t.Helper()
	logged := totals{}
	for user, v := range changelogRows(t, brokers, topic, "total", "top") {
		logged[user] = [2]int64{v[0], v[1]}
	}
	if d := diff(logged, want); d != "" {
		t.Fatalf("the changelog: %s", d)
	}
}
