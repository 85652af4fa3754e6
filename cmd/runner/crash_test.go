package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
)

var (
	seedFlag  = flag.Int64("seed", 0, "seed of the kill schedule (0: from the clock)")
	killsFlag = flag.Int("kills", 5, "SIGKILLs of the runner in TestSIGKILL, and of each runner in TestChainedSIGKILL (at least 10)")
)

type userTotal struct {
	total, orders, max, last int64
	region                   string
}

// TestSIGKILL runs a job from YAML against Kafka (a real broker when
// EBBFLOW_KAFKA_BROKERS is set, else an embedded one in this process that
// the runner dials), kills the runner with SIGKILL at seeded random moments
// while input keeps arriving, restarts it each time, then stops it
// gracefully and compares "table scan -o json" with the exact totals of the
// input. The runner syncs its table writes (syncWritesEnv), so that a kill
// leaves writes past the last checkpoint for undo to take back: the undo
// logs of the killed runs must show that some did (kills that leave nothing
// to undo prove little; -kills must be at least 2).
func TestSIGKILL(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	dir := t.TempDir()
	args := []string{"run", "-f", "testdata/orders.yaml", "--data-dir", dir, "--http-address", "127.0.0.1:0", "--summary", "0",
		"--set", "source.kafka.brokers=[" + strings.Join(brokers, ",") + "]", "--set", "source.kafka.topics=[" + topic + "]"}

	feed := &orderFeed{t: t, brokers: brokers, topic: topic, rng: rng, want: map[string]*userTotal{}}
	produce, want := feed.produce, feed.want

	env := []string{syncWritesEnv + "=1"}
	undone := 0 // keys restored by the undo at the start of each killed run
	for k := range *killsFlag {
		produce(200 + rng.Intn(500))
		c, wait := runKilled(t, rng, produce, env, args)
		undone += undoneKeys(c)
		t.Logf("kill %d after %s (the undo at that run's start restored %d keys)", k+1, wait, undoneKeys(c))
	}
	if undone == 0 {
		t.Fatalf("seed %d: %d kills, and no undo restored a key: the kills left nothing past the checkpoints, so the test proved little", seed, *killsFlag)
	}
	produce(1000)
	c := start(t, env, args...)
	diff := "not started"
	waitFor(t, c, 30*time.Second, "every order in the table (seed "+strconv.FormatInt(seed, 10)+")", func() bool {
		if liveRunner(dir) == "" {
			return false
		}
		diff = equalTotals(scanJSON(t, dir, "totals", "user"), want)
		if diff != "" {
			t.Logf("not yet: %s", diff) // the last one explains a timeout
		}
		return diff == ""
	})
	stopGracefully(t, c)
	undone += undoneKeys(c)
	if d := equalTotals(scanJSON(t, dir, "totals", "user"), want); d != "" {
		t.Fatalf("seed %d: %s", seed, d)
	}
	t.Logf("seed %d: undo restored %d keys over the runs", seed, undone)
}

// runKilled starts a runner with env and args, produces input with
// produce(n) at a seeded pace for a seeded random while (0.3–1.8 s), then
// kills it with SIGKILL; it returns the exited child and the while. The
// input keeps arriving until the kill, so that the table holds writes past
// the last checkpoint for undo to take back.
func runKilled(t *testing.T, rng *rand.Rand, produce func(n int), env, args []string) (*child, time.Duration) {
	t.Helper()
	c := start(t, env, args...)
	wait := time.Duration(300+rng.Intn(1500)) * time.Millisecond
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		produce(20 + rng.Intn(80))
		time.Sleep(time.Duration(5+rng.Intn(20)) * time.Millisecond)
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.exitCode(t, 30*time.Second)
	return c, wait
}

// orderFeed produces seeded orders to a topic of three partitions (40
// users, a user's orders on partition user mod 3, so that they keep their
// order and last_value has one right answer) and keeps the exact totals of
// the PAID ones.
type orderFeed struct {
	t       *testing.T
	brokers []string
	topic   string
	rng     *rand.Rand
	want    map[string]*userTotal
	seq     int64
}

func (f *orderFeed) produce(n int) {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		u := f.rng.Intn(40)
		user := fmt.Sprintf("u%02d", u)
		region := []string{"eu", "us", "asia"}[f.rng.Intn(3)]
		amount := int64(f.rng.Intn(1000) + 1)
		status := "PAID"
		if f.rng.Intn(5) == 0 {
			status = "CANCELLED"
		}
		v, _ := json.Marshal(map[string]any{"seq": f.seq, "user": user, "region": region, "amount": amount, "status": status})
		recs[i] = &kgo.Record{Topic: f.topic, Partition: int32(u % 3), Key: []byte(user), Value: v}
		if status == "PAID" {
			w := f.want[user]
			if w == nil {
				w = &userTotal{}
				f.want[user] = w
			}
			w.total += amount * 100
			w.orders++
			w.max = max(w.max, amount)
			w.region, w.last = region, f.seq
		}
		f.seq++
	}
	kafkatest.Produce(f.t, f.brokers, recs...)
}

// equalTotals describes the first difference between the scanned table
// and the expected totals ("" when equal).
func equalTotals(got map[string]map[string]any, want map[string]*userTotal) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d users, want %d", len(got), len(want))
	}
	for user, w := range want {
		g := got[user]
		num := func(col string) int64 {
			n, _ := strconv.ParseInt(fmt.Sprint(g[col]), 10, 64)
			return n
		}
		have := userTotal{total: num("total"), orders: num("orders"), max: num("max"), last: num("last"), region: fmt.Sprint(g["region"])}
		if have != *w {
			return fmt.Sprintf("user %s: got %+v, want %+v", user, have, *w)
		}
	}
	return ""
}
