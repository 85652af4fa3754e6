package repartition

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the scale test's input (0: a new one)")

const (
	scaleBuckets = 8
	scaleInput   = 4 // input partitions
)

func scaleSchema() aggmerge.Schema {
	i64 := agg.Type{Kind: agg.KindInt64}
	return aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "user", Type: agg.Type{Kind: agg.KindString}}},
		Values: []aggmerge.Column{
			{Name: "total", Type: i64, Func: "sum"},
			{Name: "top", Type: i64, Func: "max"},
		},
		Buckets: scaleBuckets,
	}
}

// totals is the exact table: user → (sum, max).
type totals map[string][2]int64

// input makes n seeded orders "<user>,<amount>" from seq from on, adding
// them to want.
func input(rng *rand.Rand, topic string, from, n int, want totals) []*kgo.Record {
	var recs []*kgo.Record
	for seq := from; seq < from+n; seq++ {
		user, amount := fmt.Sprintf("u%d", rng.IntN(300)), rng.Int64N(1000)
		w := want[user]
		w[0] += amount
		w[1] = max(w[1], amount)
		want[user] = w
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(rng.IntN(scaleInput)), Value: fmt.Appendf(nil, "%s,%d", user, amount)})
	}
	return recs
}

// orderRow is stage 1's mapper: "<user>,<amount>" → key user, total and
// top amount.
func orderRow(r *kgo.Record, row *writer.Row) (bool, error) {
	user, amount, ok := strings.Cut(string(r.Value), ",")
	n, err := strconv.ParseInt(amount, 10, 64)
	if !ok || err != nil {
		return false, fmt.Errorf("not an order: %q", r.Value)
	}
	row.Kind = runtime.RowInsert
	row.Key = append(row.Key[:0], agg.StringValue(user))
	row.Vals = append(row.Vals[:0], agg.IntValue(n), agg.IntValue(n))
	return true, nil
}

// instance is one instance of the scaled job: its table, stage 1 (the
// hop's writer) and stage 2 (a job reading the owned partitions into the
// table), and with failover the handovers of its partitions and their
// publishers.
type instance struct {
	dir       string
	table     *aggmerge.Table
	owned     []int32
	polled    atomic.Int64 // input records stage 1 mapped
	job       *runtime.Job
	stop1     context.CancelFunc
	kill2     context.CancelFunc // ends stage 2 without a final checkpoint
	done1     chan error
	done2     chan error
	handovers []*Handover
	stopPub   context.CancelFunc
	donePub   chan error
}

func startInstance(t *testing.T, brokers []string, input, topic string, i, n int) *instance {
	return start(t, brokers, input, topic, i, n, "", false)
}

// startOwner starts an instance with failover: it takes its partitions
// over (Take) before stage 2 starts, resumes them where the owner log
// says, and publishes what stage 2 commits.
func startOwner(t *testing.T, brokers []string, input, topic string, i, n int) *instance {
	return start(t, brokers, input, topic, i, n, "", true)
}

func ownerConfig(brokers []string, topic string, i int) OwnerConfig {
	return OwnerConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: topic, Owner: fmt.Sprintf("scale/totals#%d", i)}
}

// start starts instance i of n on the data directory dir (a new one when
// empty).
func start(t *testing.T, brokers []string, input, topic string, i, n int, dir string, failover bool) *instance {
	ctx := t.Context()
	if dir == "" {
		dir = t.TempDir()
	}
	table, router := openScaleTable(t, dir)
	in := &instance{dir: dir, table: table, owned: Owned(scaleBuckets, i, n), done1: make(chan error, 1), done2: make(chan error, 1)}
	conn := kafka.Connection{Brokers: brokers}
	scfg := SourceConfig{Kafka: conn, Topic: topic, Owned: in.owned}
	if failover {
		scfg.Resume, scfg.Positions = map[int32]int64{}, kafka.NewPositions()
		for _, p := range in.owned {
			h, err := Take(ctx, ownerConfig(brokers, topic, i), table, p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h.Close)
			in.handovers = append(in.handovers, h)
			scfg.Resume[p] = h.Resume
		}
	}

	send := router.Owner().Sender(orderRow)
	in.stop1 = runStage1(t, brokers, input, topic, i, in.done1, func(r *kgo.Record, s func(key, value []byte)) error {
		in.polled.Add(1)
		return send(r, s)
	})
	src, err := NewSource(scfg, router)
	if err != nil {
		t.Fatal(err)
	}
	if in.job, err = newStage2(dir, src, router); err != nil {
		t.Fatal(err)
	}
	ctx2, kill2 := context.WithCancel(ctx)
	in.kill2 = kill2
	go func() { in.done2 <- in.job.Run(ctx2) }()
	if failover {
		ctxPub, stopPub := context.WithCancel(ctx)
		in.stopPub, in.donePub = stopPub, make(chan error, len(in.handovers))
		cl := export.Topic{Name: testChangelog(topic).Topic, Partitions: scaleBuckets, Replication: -1, Table: "totals"}
		if err := export.EnsureTopic(ctx, kafkatest.Admin(t, brokers), cl, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err) // as Owners.Run makes it
		}
		for _, h := range in.handovers {
			pb, err := NewPublisher(h, table, scfg.Positions, router.Groups(), testChangelog(topic))
			if err != nil {
				t.Fatal(err)
			}
			go func() { in.donePub <- pb.Run(ctxPub) }()
		}
	}
	return in
}

// openScaleTable opens the table of an instance in data directory dir
// and the router of its one job, "scale", writing it with sink "totals".
func openScaleTable(t testing.TB, dir string) (*aggmerge.Table, *Router) {
	table, err := aggmerge.Open(filepath.Join(dir, "tables", "totals"), scaleSchema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = table.Close() })
	codec, err := NewCodec(table, "scale", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(nil, JobWriter{Codec: codec, Sink: "totals", Config: writer.Config{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	return table, r
}

// runStage1 starts stage 1 of instance i, which ends into done; the
// returned function stops it (committing what it polled).
func runStage1(t *testing.T, brokers []string, input, topic string, i int, done chan<- error,
	mapRecord func(r *kgo.Record, send func(key, value []byte)) error) context.CancelFunc {
	return runWriter(t, WriterConfig{Kafka: kafka.Connection{Brokers: brokers}, Group: topic + "-group", Input: []string{input},
		Topic: topic, Buckets: scaleBuckets, TransactionalID: fmt.Sprintf("%s-%d", topic, i)}, done, mapRecord)
}

// runWriter starts stage 1 with cfg, which ends into done; the returned
// function stops it (committing what it polled).
func runWriter(t *testing.T, cfg WriterConfig, done chan<- error, mapRecord func(r *kgo.Record, send func(key, value []byte)) error) context.CancelFunc {
	w, err := NewWriter(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	go func() { done <- w.Run(ctx, 50*time.Millisecond, mapRecord) }()
	return stop
}

// newStage2 makes stage 2 of an instance: src into the table's writers.
func newStage2(dir string, src *kafka.Source[Partial], r *Router) (*runtime.Job, error) {
	job := runtime.NewJob(runtime.Options{Name: "scale", DataDir: dir,
		Checkpoint: runtime.CheckpointOptions{Interval: 50 * time.Millisecond}})
	rows := runtime.FromSource(job, "repartition", src.New)
	return job, r.AddWriters(rows)
}

// stop ends stage 1 (committing what it polled), then stage 2 (with a
// final checkpoint), then the publishers (publishing that checkpoint).
func (in *instance) stop(t *testing.T) {
	in.stop1()
	if err := <-in.done1; err != nil {
		t.Errorf("stage 1: %v", err)
	}
	in.job.Stop()
	if err := <-in.done2; err != nil {
		t.Errorf("stage 2: %v", err)
	}
	in.stopPublishers(t)
}

// stopPublishers ends the publishers, which publish what stage 2 committed
// by then.
func (in *instance) stopPublishers(t *testing.T) {
	if in.stopPub == nil {
		return
	}
	in.stopPub()
	for range in.handovers {
		if err := <-in.donePub; err != nil {
			t.Errorf("publisher: %v", err)
		}
	}
	in.stopPub = nil
}

// scan reads a table into got, failing on a row of a bucket the instance
// does not own or on a key already read from another instance.
func (in *instance) scan(t *testing.T, got totals, check bool) int {
	rows := 0
	err := in.table.Scan(func(r aggmerge.Row) error {
		rows++
		user := r.Key[0].Str()
		if check {
			key, err := in.table.EncodeKey(r.Key)
			if err != nil {
				return err
			}
			p := int32(base.Owner(base.BucketOf(key, scaleBuckets), scaleBuckets))
			if !containsPartition(in.owned, p) {
				t.Errorf("user %s (partition %d) applied by the instance owning %v", user, p, in.owned)
			}
			if _, dup := got[user]; dup {
				t.Errorf("user %s in two instances' tables", user)
			}
		}
		got[user] = [2]int64{r.Values[0].Int(), r.Values[1].Int()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func containsPartition(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func union(t *testing.T, ins []*instance, check bool) totals {
	got := make(totals)
	for _, in := range ins {
		in.scan(t, got, check)
	}
	return got
}

func diff[M ~map[string]V, V comparable](got, want M) string {
	var d []string
	for u, w := range want {
		if g, ok := got[u]; !ok || g != w {
			d = append(d, fmt.Sprintf("%s: %v, want %v", u, got[u], w))
		}
	}
	for u, g := range got {
		if _, ok := want[u]; !ok {
			d = append(d, fmt.Sprintf("%s: %v, want no row", u, g))
		}
	}
	if len(d) > 10 {
		d = append(d[:10], fmt.Sprintf("… %d in all", len(d)))
	}
	return strings.Join(d, "; ")
}

// TestScaleTwoInstances runs one job in two instances (in this process,
// each with its own data directory and table, sharing the Kafka cluster):
// the consumer group spreads the input, the repartition topic takes each
// row to the partition of its bucket, and each instance applies only the
// buckets of the partitions it owns. Input arrives before and while both
// run. At the end the union of the two tables equals the exact aggregates
// of the seeded input, no key is in both, and each instance applied some.
func TestScaleTwoInstances(t *testing.T) {
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

	ins := []*instance{startInstance(t, brokers, in, topic, 0, 2), startInstance(t, brokers, in, topic, 1, 2)}
	kafkatest.WaitGroupShared(t, brokers, topic+"-group", 2)
	for round := range 5 {
		kafkatest.Produce(t, brokers, input(rng, in, 1500+round*300, 300, want)...)
	}

	waitTotals(t, ins, want)
	for _, i := range ins {
		i.stop(t)
	}
	if d := diff(union(t, ins, true), want); d != "" {
		t.Fatalf("after the stop: %s", d)
	}
	for n, i := range ins {
		rows := i.scan(t, make(totals), false)
		t.Logf("instance %d: owns partitions %v, mapped %d input records, holds %d rows", n, i.owned, i.polled.Load(), rows)
		if i.polled.Load() == 0 || rows == 0 {
			t.Errorf("instance %d took no part (mapped %d, rows %d)", n, i.polled.Load(), rows)
		}
	}
}

// waitTotals waits until the union of the instances' tables equals want,
// failing when a stage ends first or on the timeout.
func waitTotals(t *testing.T, ins []*instance, want totals) {
	t.Helper()
	deadline := time.After(kafkatest.Timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for diff(union(t, ins, false), want) != "" {
		for n, in := range ins {
			select {
			case err := <-in.done1:
				t.Fatalf("stage 1 of instance %d ended: %v", n, err)
			case err := <-in.done2:
				t.Fatalf("stage 2 of instance %d ended: %v", n, err)
			case err := <-in.donePub:
				t.Fatalf("a publisher of instance %d ended: %v", n, err)
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("the tables never reached the exact totals: %s", diff(union(t, ins, false), want))
		case <-tick.C:
		}
	}
}

// waitCheckpoint waits until stage 2 of in completed a checkpoint after
// the call (one that covers everything it applied before it).
func waitCheckpoint(t *testing.T, in *instance) {
	t.Helper()
	last := func() uint64 {
		ws := in.table.Writers()
		if len(ws) != 1 {
			t.Fatalf("writers of the table: %v", ws)
		}
		return ws[0].Checkpoint
	}
	from := last()
	deadline := time.Now().Add(kafkatest.Timeout)
	for last() <= from+1 {
		if time.Now().After(deadline) {
			t.Fatalf("stage 2 completed no checkpoint after %d", from)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
