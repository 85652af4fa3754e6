package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// tsBound is the max_out_of_orderness of testdata/ts_barrier.yaml.
const tsBound = 2 * time.Second

// tsInput is the input of TestAbuseTimestampBarrierSIGKILL: orders over
// three partitions, each record at most 1.5 s behind the largest event
// time of its partition (within the bound: never late), event time moving
// on about 1 ms per record.
type tsInput struct {
	t       *testing.T
	rng     *rand.Rand
	brokers []string
	topic   string
	clock   [3]time.Time // per partition: its largest event time
	orders  []tsOrder
}

type tsOrder struct {
	user   string
	amount int64
	at     int64 // Unix ms
}

// produce writes n records, each to a random partition.
func (in *tsInput) produce(n int) {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		p := in.rng.Intn(len(in.clock))
		in.clock[p] = in.clock[p].Add(time.Duration(in.rng.Intn(6)) * time.Millisecond)
		in.add(&recs[i], p, in.clock[p].Add(-time.Duration(in.rng.Intn(1500))*time.Millisecond))
	}
	kafkatest.Produce(in.t, in.brokers, recs...)
}

func (in *tsInput) add(rec **kgo.Record, p int, at time.Time) {
	o := tsOrder{user: fmt.Sprintf("u%02d", in.rng.Intn(20)), amount: int64(len(in.orders)%997 + 1), at: at.UnixMilli()}
	in.orders = append(in.orders, o)
	v, _ := json.Marshal(map[string]any{"seq": len(in.orders), "user": o.user, "amount": o.amount, "at": at.UTC().Format(time.RFC3339Nano)})
	*rec = &kgo.Record{Topic: in.topic, Partition: int32(p), Key: []byte(o.user), Value: v}
}

// end moves every partition's event time 5 s on and returns the last
// boundary the job's watermark then passes: the least of the partitions'
// largest event times, less the bound and 1 ns, down to a whole second.
func (in *tsInput) end() int64 {
	recs := make([]*kgo.Record, len(in.clock))
	for p := range in.clock {
		in.clock[p] = in.clock[p].Add(5 * time.Second)
		in.add(&recs[p], p, in.clock[p])
	}
	kafkatest.Produce(in.t, in.brokers, recs...)
	least := slices.MinFunc(in.clock[:], func(a, b time.Time) int { return a.Compare(b) })
	wm := least.UnixNano() - int64(tsBound) - 1
	return wm / int64(time.Second) * 1000
}

// upTo is the plain model of the table at event time t (Unix ms): per user
// the total and the count of the orders at or before t.
func (in *tsInput) upTo(t int64) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, o := range in.orders {
		if o.at <= t {
			s := out[o.user]
			out[o.user] = [2]float64{s[0] + float64(o.amount), s[1] + 1}
		}
	}
	return out
}

// TestAbuseTimestampBarrierSIGKILL runs a job whose versions are cut on
// 1 s boundaries of event time (testdata/ts_barrier.yaml: parallelism 2,
// three partitions out of order within the bound) in a runner process,
// kills it with SIGKILL at seeded random moments while orders keep
// arriving, and restarts it on its data directory each time: the restart
// undoes past the last cut, reads again the records its sources held back,
// and republishes the restored version. Then the input moves event time
// on and stops. Every version the runner published over its lives, read
// from the versions topic, holds exactly the orders with an event time at
// or before its own (the committed changelog replayed to the version's end
// offsets against the plain model), the version numbers only grow, and the
// last boundary the watermark passes is published.
func TestAbuseTimestampBarrierSIGKILL(t *testing.T) {
	bad := runAbuseTS(t)
	if len(bad) > 0 {
		if len(bad) > 4 {
			bad = append(bad[:4], fmt.Sprintf("and %d more", len(bad)-4))
		}
		t.Fatalf("these versions break the timestamp barrier:\n%s", strings.Join(bad, "\n"))
	}
}

// TestAbuseTimestampBarrierSIGKILLBites runs the same harness with the
// job's versions cut at its checkpoints (every 300ms): a version's content
// then holds orders past its event time (the watermark), so the check
// must find versions that break the promise, or it proves nothing.
func TestAbuseTimestampBarrierSIGKILLBites(t *testing.T) {
	bad := runAbuseTS(t, "--set", "versions={by: checkpoint}", "--set", "checkpoint.interval=300ms")
	bad = slices.DeleteFunc(bad, func(s string) bool { return !strings.Contains(s, "the orders up to it") })
	if len(bad) == 0 {
		t.Fatal("versions cut at checkpoints kept the timestamp barrier's promise: the check cannot tell")
	}
	t.Logf("detected, as it must be: %d versions, e.g. %.200s", len(bad), bad[0])
}

// runAbuseTS runs the harness (the runner with extra arguments) and
// returns what breaks the promise, one line per version.
func runAbuseTS(t *testing.T, extra ...string) []string {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	brokers := kafkatest.Brokers(t)
	in := &tsInput{t: t, rng: rand.New(rand.NewSource(seed)), brokers: brokers, topic: kafkatest.NewTopic(t, brokers, 3)}
	for p := range in.clock {
		in.clock[p] = time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)
	}
	changelog := kafkatest.TopicName(t, brokers)
	dir := t.TempDir()
	args := append([]string{"run", "-f", "testdata/ts_barrier.yaml", "--data-dir", dir, "--http-address", "127.0.0.1:0", "--summary", "0"}, extra...)
	env := []string{syncWritesEnv + "=1", "KAFKA_BROKERS=" + strings.Join(brokers, ","), "ORDERS_TOPIC=" + in.topic, "CHANGELOG_TOPIC=" + changelog}
	undone := 0
	for k := range *killsFlag {
		in.produce(200 + in.rng.Intn(300))
		c, wait := runKilled(t, in.rng, in.produce, env, args)
		undone += undoneKeys(c)
		t.Logf("kill %d after %s (the undo at that run's start restored %d keys)", k+1, wait, undoneKeys(c))
	}
	last := in.end()
	c := start(t, env, args...)
	conn := kafka.Connection{Brokers: brokers}
	var vs []export.Version
	waitFor(t, c, 90*time.Second, fmt.Sprintf("a version at the last boundary %d (seed %d)", last, seed), func() bool {
		var err error
		if vs, err = export.ReadVersions(context.Background(), conn, changelog+".versions"); err != nil {
			t.Fatalf("seed %d: read the versions: %v", seed, err)
		}
		return slices.ContainsFunc(vs, func(v export.Version) bool { return v.EventTimeMs >= last })
	})
	stopGracefully(t, c)
	undone += undoneKeys(c)

	vs, err := export.ReadVersions(context.Background(), conn, changelog+".versions")
	if err != nil {
		t.Fatalf("seed %d: read the versions: %v", seed, err)
	}
	log := kafkatest.ConsumeStable(t, brokers, changelog)
	var bad []string
	if !slices.ContainsFunc(vs, func(v export.Version) bool { return v.EventTimeMs == last }) {
		bad = append(bad, fmt.Sprintf("no version at the last boundary %d", last))
	}
	for i, v := range vs {
		if i > 0 && v.Version <= vs[i-1].Version {
			t.Fatalf("seed %d: version %d after %d", seed, v.Version, vs[i-1].Version)
		}
		if v.EventTimeMs%1000 != 0 || v.EventTimeMs <= 0 {
			bad = append(bad, fmt.Sprintf("version %d at event time %d: not a boundary", v.Version, v.EventTimeMs))
		}
		got := map[string][2]float64{}
		for _, row := range kafkatest.Replay(t, log, v.EndOffsets, false) {
			got[fmt.Sprint(row["user"])] = [2]float64{row["total"].(float64), row["orders"].(float64)}
		}
		if want := in.upTo(v.EventTimeMs); !maps.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("version %d at event time %d: %v, the orders up to it: %v", v.Version, v.EventTimeMs, got, want))
		}
	}
	for i := range bad {
		bad[i] = fmt.Sprintf("seed %d: of %d versions: %s", seed, len(vs), bad[i])
	}
	if undone == 0 {
		t.Fatalf("seed %d: %d kills, and no undo restored a key: the kills left nothing past the cuts, so the test proved little", seed, *killsFlag)
	}
	t.Logf("seed %d: %d orders; %d versions, %d broken promises (a version not on a boundary, or not exactly the orders up to its event time); undo restored %d keys over the runs",
		seed, len(in.orders), len(vs), len(bad), undone)
	return bad
}
