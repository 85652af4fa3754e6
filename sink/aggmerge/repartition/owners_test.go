package repartition

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// dynamic is an instance of the scaled job with dynamic ownership: stage 1
// as in the static tests, stage 2 under Owners.
type dynamic struct {
	table  *aggmerge.Table
	owners *Owners
	stop1  context.CancelFunc
	kill   context.CancelFunc // ends stage 2 without a final checkpoint
	done1  chan error
	done2  chan error
}

func startDynamic(t *testing.T, brokers []string, input, topic string, i int) *dynamic {
	dir := t.TempDir()
	table, router := openScaleTable(t, dir)
	return startDynamicOn(t, brokers, input, topic, i, dir, table, router)
}

// startDynamicOn starts instance i of the owner job on table (in dir),
// whose writers are router's.
func startDynamicOn(t *testing.T, brokers []string, input, topic string, i int, dir string, table *aggmerge.Table, router *Router) *dynamic {
	d := &dynamic{table: table, done1: make(chan error, 1), done2: make(chan error, 1)}
	d.stop1 = runStage1(t, brokers, input, topic, i, d.done1, router.Owner().Sender(orderRow))
	d.owners = NewOwners(ownersConfig(brokers, topic, i, dir, table, router))
	ctx, kill := context.WithCancel(t.Context())
	d.kill = kill
	go func() { d.done2 <- d.owners.Run(ctx) }()
	return d
}

// stop ends stage 1, then stage 2 with a final checkpoint.
func (d *dynamic) stop(t *testing.T) {
	d.stop1()
	if err := <-d.done1; err != nil {
		t.Errorf("stage 1: %v", err)
	}
	d.owners.Stop()
	if err := <-d.done2; err != nil {
		t.Errorf("stage 2: %v", err)
	}
}

// crash ends stage 1, then stage 2 without a final checkpoint, as a
// killed process would leave them (its group membership ends with it).
func (d *dynamic) crash() {
	d.stop1()
	<-d.done1
	d.kill()
	<-d.done2
}

// unionDiff says how the union of the instances' tables differs from
// want, or which key is in two of them ("" when neither).
func unionDiff(t *testing.T, ds []*dynamic, want totals) string {
	got := make(totals)
	for n, d := range ds {
		part := make(totals)
		(&instance{table: d.table}).scan(t, part, false)
		for u, v := range part {
			if _, dup := got[u]; dup {
				return fmt.Sprintf("user %s in two tables (instance %d's too)", u, n)
			}
			got[u] = v
		}
	}
	return diff(got, want)
}

// TestOwnersRebalance runs one job in three instances under dynamic
// ownership (the group <topic>-owners over the repartition topic). Input
// keeps arriving; one instance's stage 2 is aborted (no final checkpoint,
// its partitions are given up through the group) and a fourth instance
// joins later. Each handover takes its partitions over from the owner log.
// Each time, the union of the live instances' tables equals the exact
// totals and they own every partition once; at the end (all stopped) the
// owner log holds the exact totals (ReadAll), and CheckOwners passes.
func TestOwnersRebalance(t *testing.T) {
	brokers, in, topic, want, produce := seededInput(t)
	produce(600)
	ds := []*dynamic{startDynamic(t, brokers, in, topic, 0), startDynamic(t, brokers, in, topic, 1), startDynamic(t, brokers, in, topic, 2)}
	produce(300)
	waitOwned(t, ds)
	waitDynamic(t, ds, want)

	ds[1].crash()
	ds = slices.Delete(ds, 1, 2)
	for range 3 {
		produce(100)
		time.Sleep(20 * time.Millisecond)
	}
	waitOwned(t, ds)
	waitDynamic(t, ds, want)

	ds = append(ds, startDynamic(t, brokers, in, topic, 3))
	for range 3 {
		produce(100)
		time.Sleep(20 * time.Millisecond)
	}
	waitOwned(t, ds)
	waitDynamic(t, ds, want)
	for _, d := range ds {
		d.stop(t)
	}
	// Stopped one after the other, the last ones took the first ones'
	// buckets over: the whole table is the owner log's.
	whole := freshTable(t)
	rows, err := ReadAll(t.Context(), kafka.Connection{Brokers: brokers}, topic, whole)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(union(t, []*instance{{table: whole}}, false), want); d != "" {
		t.Fatalf("the owner log after the stop: %s", d)
	}
	t.Logf("the owner log holds %d rows", rows)
	if err := CheckOwners(t.Context(), kafka.Connection{Brokers: brokers}, topic, scaleBuckets, 2); err != nil {
		t.Fatal(err)
	}
	checkChangelog(t, brokers, topic, want)
}

// waitOwned waits until the instances own every partition between them,
// each once, and each owns one at least.
func waitOwned(t *testing.T, ds []*dynamic) {
	t.Helper()
	deadline := time.Now().Add(kafkatest.Timeout)
	for {
		var all []int32
		for _, d := range ds {
			all = append(all, d.owners.Owned()...)
		}
		slices.Sort(all)
		if len(all) == scaleBuckets && len(slices.Compact(all)) == scaleBuckets && each(ds) {
			return
		}
		ended(t, ds)
		if time.Now().After(deadline) {
			t.Fatalf("the instances own %v", all)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDynamic waits until the union of the instances' tables equals want,
// failing when a stage ends first.
func waitDynamic(t *testing.T, ds []*dynamic, want totals) {
	t.Helper()
	deadline := time.Now().Add(kafkatest.Timeout)
	for {
		d := unionDiff(t, ds, want)
		if d == "" {
			return
		}
		ended(t, ds)
		if time.Now().After(deadline) {
			t.Fatalf("the tables never reached the exact totals: %s", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// seededInput makes the input topic and the repartition topic of a test
// on the test's brokers, and returns produce, which writes n more seeded
// orders to the input (the seed is logged; -seed repeats it), adding them
// to want.
func seededInput(t *testing.T) (brokers []string, in, topic string, want totals, produce func(n int)) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-seed %d repeats the input)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	brokers = kafkatest.Brokers(t)
	in = kafkatest.NewTopic(t, brokers, scaleInput)
	topic = kafkatest.TopicName(t, brokers)
	want = make(totals)
	seq := 0
	produce = func(n int) {
		kafkatest.Produce(t, brokers, input(rng, in, seq, n, want)...)
		seq += n
	}
	return brokers, in, topic, want, produce
}

// each reports whether every instance owns a partition.
func each(ds []*dynamic) bool {
	for _, d := range ds {
		if len(d.owners.Owned()) == 0 {
			return false
		}
	}
	return true
}

// ended fails when a stage of an instance ended.
func ended(t *testing.T, ds []*dynamic) {
	t.Helper()
	for n, d := range ds {
		select {
		case err := <-d.done1:
			t.Fatalf("stage 1 of instance %d ended: %v", n, err)
		case err := <-d.done2:
			t.Fatalf("stage 2 of instance %d ended: %v", n, err)
		default:
		}
	}
}

// ownersConfig is the dynamic ownership of instance i, whose data
// directory is dir: stage 2 as in the static tests, over the partitions
// the group <topic>-owners assigns (session timeout 6s).
func ownersConfig(brokers []string, topic string, i int, dir string, table *aggmerge.Table, router *Router) OwnersConfig {
	return OwnersConfig{Owner: ownerConfig(brokers, topic, i), Table: table, Group: topic + "-owners",
		SessionTimeout: 6 * time.Second, Writers: router.Groups(), Changelog: testChangelog(topic),
		Stage2: func(owned []int32, resume map[int32]int64, pos *kafka.Positions) (Stage2, error) {
			src, err := NewSource(SourceConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: topic, Owned: owned,
				Resume: resume, ResumeOnRestore: true, Positions: pos}, router)
			if err != nil {
				return nil, err
			}
			return newStage2(dir, src, router)
		}}
}

// testChangelog is the table's changelog of the dynamic-ownership tests:
// their Publishers write it in the owner log's transactions.
func testChangelog(topic string) *Changelog {
	return &Changelog{Table: "totals", Topic: topic + "-changelog", Format: export.DebeziumJSON}
}

// changelogRows replays the changelog of the tests' table (testChangelog)
// to its end, read_committed, checking each change's before-image against
// the row replayed so far (kafkatest.ReplayChecked: the Publishers' images
// must never show a value that was not the committed one), and returns
// each user's value columns (0 for a null).
func changelogRows(t *testing.T, brokers []string, topic string, columns ...string) map[string][]int64 {
	t.Helper()
	recs := kafkatest.ConsumeStable(t, brokers, testChangelog(topic).Topic)
	got := map[string][]int64{}
	for _, row := range kafkatest.ReplayChecked(t, recs) {
		vals := make([]int64, len(columns))
		for i, name := range columns {
			if n, ok := row[name].(json.Number); ok {
				vals[i], _ = n.Int64()
			}
		}
		got[row["user"].(string)] = vals
	}
	t.Logf("the changelog holds %d changes of %d users", len(recs), len(got))
	return got
}
