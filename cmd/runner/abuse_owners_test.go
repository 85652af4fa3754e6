package main

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge/repartition"
)

// ownedScale is the orders job in scale mode with ownership group: its
// runners share the buckets through the group <job>.owners.
type ownedScale struct {
	t           *testing.T
	brokers     []string
	job         string
	args, env   []string
	repartition string
	dirs        map[int]string
	runners     map[int]*child // the live ones
}

func newOwnedScale(t *testing.T, brokers []string, topic string, env []string) *ownedScale {
	job := uniqueJob()
	return &ownedScale{t: t, brokers: brokers, job: job, args: scaledArgs(brokers, topic, job), env: env,
		repartition: kafkatest.TopicName(t, brokers), dirs: map[int]string{}, runners: map[int]*child{}}
}

// scaleSet is the job.scale of instance i (session timeout 6s: the
// brokers' least by default).
func (o *ownedScale) scaleSet(i int) string {
	return fmt.Sprintf("job.scale={mode: kafka, ownership: group, instance: %d, repartition_topic: %s, session_timeout: 6s}", i, o.repartition)
}

// start runs instance i in its data directory (a new one on its first
// start).
func (o *ownedScale) start(i int) *child {
	if o.dirs[i] == "" {
		o.dirs[i] = o.t.TempDir()
	}
	c := start(o.t, o.env, slices.Concat(o.args, []string{"--data-dir", o.dirs[i], "--set", o.scaleSet(i)})...)
	o.runners[i] = c
	return c
}

// live returns the live instances, sorted.
func (o *ownedScale) live() []int {
	var is []int
	for i := range o.runners {
		is = append(is, i)
	}
	slices.Sort(is)
	return is
}

// diff says how the live instances' tables together differ from the
// exact totals, and whether their /readyz name every bucket once ("" when
// they hold the exact totals, no user twice, and own every bucket once).
func (o *ownedScale) diff(feed *orderFeed) string {
	owners := map[int][]int{}
	all := map[string]map[string]any{}
	for _, i := range o.live() {
		dir := o.dirs[i]
		if liveRunner(dir) == "" {
			return fmt.Sprintf("instance %d does not serve", i)
		}
		_, st := readyScale(o.t, dir)
		if st == nil || st.Ownership != "group" {
			return fmt.Sprintf("/readyz of instance %d: scale %+v, want ownership group", i, st)
		}
		for _, b := range st.OwnedBuckets {
			owners[b] = append(owners[b], i)
		}
		for u, r := range scanJSON(o.t, dir, "totals", "user") {
			if _, dup := all[u]; dup {
				return fmt.Sprintf("user %s in two tables", u)
			}
			all[u] = r
		}
	}
	for b := range 8 {
		if len(owners[b]) != 1 {
			return fmt.Sprintf("bucket %d owned by %v", b, owners[b])
		}
	}
	return equalTotals(all, feed.want)
}

// waitExact waits until the live instances hold the exact totals and own
// every bucket once between them.
func (o *ownedScale) waitExact(feed *orderFeed, seed int64, what string) {
	o.t.Helper()
	last := ""
	for _, i := range o.live() {
		waitFor(o.t, o.runners[i], 90*time.Second, fmt.Sprintf("%s: the exact totals over instances %v (seed %d)", what, o.live(), seed), func() bool {
			last = o.diff(feed)
			return last == ""
		})
	}
	o.t.Logf("%s: instances %v hold the exact totals", what, o.live())
}

// feedFor produces orders at a seeded pace for d.
func feedFor(feed *orderFeed, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		feed.produce(20 + feed.rng.Intn(80))
		time.Sleep(time.Duration(10+feed.rng.Intn(40)) * time.Millisecond)
	}
}

// TestAbuseScaleOwnersFailover runs the orders job in three runner
// processes with ownership group (docs/SCALING.md, "Dynamic ownership")
// while orders keep arriving. One of them, at random, is killed with
// SIGKILL: within the session timeout (6s here) the group gives its buckets
// to the two others, which take them over from the owner log. A fourth
// runner is added later and takes buckets from them the same way. Each
// time the live runners' tables together hold the exact totals and their
// /readyz name every bucket once; the owner log's
// epochs show no bucket applied by two owners at once (CheckOwners), and
// the added runner's /metrics counted its rebalances, the rows it rebuilt
// and its handovers. Once all stopped, table scan --all from the job file
// (the owner log) gives the exact totals.
func TestAbuseScaleOwnersFailover(t *testing.T) {
	seed, feed := seededOrders(t)
	brokers, topic := feed.brokers, feed.topic
	feed.produce(300)
	o := newOwnedScale(t, brokers, topic, []string{syncWritesEnv + "=1"})
	for i := range 3 {
		o.start(i)
	}
	kafkatest.WaitGroupShared(t, brokers, o.job+".owners", 3)
	feedFor(feed, time.Second)
	o.waitExact(feed, seed, "three runners")

	victim := feed.rng.Intn(3)
	feedFor(feed, time.Duration(200+feed.rng.Intn(800))*time.Millisecond)
	if err := o.runners[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o.runners[victim].exitCode(t, 30*time.Second)
	delete(o.runners, victim)
	t.Logf("instance %d killed", victim)
	feedFor(feed, time.Second)
	o.waitExact(feed, seed, fmt.Sprintf("instance %d killed", victim))

	o.start(3)
	feedFor(feed, time.Second)
	kafkatest.WaitGroupShared(t, brokers, o.job+".owners", 3)
	o.waitExact(feed, seed, "instance 3 added")
	_, st := readyScale(t, o.dirs[3])
	if len(st.OwnedBuckets) == 0 {
		t.Fatalf("the added runner owns no bucket: %+v", st)
	}
	_, metrics := httpGet(t, "http://"+liveRunner(o.dirs[3])+"/metrics")
	for _, series := range []string{`ebbflow_repartition_rebalances_total{job="` + o.job + `"}`, `ebbflow_repartition_rows_rebuilt_total{job="` + o.job + `"}`,
		`ebbflow_repartition_handover_seconds_count{job="` + o.job + `"}`, `ebbflow_repartition_owned_partitions{job="` + o.job + `"}`} {
		if !metricAtLeast(metrics, series, 1) {
			t.Errorf("/metrics of the added runner: %s is not at least 1", series)
		}
	}
	for _, i := range o.live() {
		stopGracefully(t, o.runners[i])
	}
	// Stopped one after the other, the last ones took the first ones'
	// buckets over: the whole table is the owner log's.
	if d := o.scanAll(feed); d != "" {
		t.Fatalf("seed %d: table scan --all from the job file: %s", seed, d)
	}
	if err := repartition.CheckOwners(t.Context(), kafka.Connection{Brokers: brokers}, o.repartition, 8, 5); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	t.Logf("seed %d: %d orders, %d users", seed, feed.seq, len(feed.want))
}

// scanAll runs table scan --all from the job file (no runner) and says how
// its rows differ from the exact totals.
func (o *ownedScale) scanAll(feed *orderFeed) string {
	args := []string{"table", "scan", "--all", "--table", "totals", "-o", "json", "-f", "testdata/orders.yaml", "--set", o.scaleSet(0)}
	for i, a := range o.args {
		if a == "--set" {
			args = append(args, a, o.args[i+1])
		}
	}
	out, stderr, code := runCLIErr(o.t, nil, args...)
	if code != 0 {
		return fmt.Sprintf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "from its owner log") {
		return "it does not say it read the owner log: " + stderr
	}
	return equalTotals(jsonRows(o.t, out, "user"), feed.want)
}

// unfencedOwnersEnv gives the runner child an owner-log transactional id
// per instance instead of per partition
// (build.Options.UnsafeOwnerLogIDPerInstance): a new owner no longer
// fences the previous one. The bite of TestAbuseScaleOwnersZombie.
const unfencedOwnersEnv = "EBBFLOW_TEST_UNSAFE_OWNER_LOG_ID_PER_INSTANCE"

// TestAbuseScaleOwnersZombie pauses (SIGSTOP) one of two runners with
// ownership group for longer than the session timeout while orders keep
// arriving, until the other owns every bucket: it took the paused one's
// over, fencing it through each partition's owner-log transactional id.
// Resumed (SIGCONT), the zombie still applies what it reads and publishes
// it: that publish fails with PRODUCER_FENCED, and the zombie stops with
// exit 1 naming the fencing; the owner log passes CheckOwners, and the
// other runner holds the exact totals. The bite, "unfenced" (a
// transactional id per instance): the zombie's publish commits after the
// new owner's claim, and CheckOwners reports ErrTwoOwners.
func TestAbuseScaleOwnersZombie(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "fenced", false: "unfenced"}[fenced], func(t *testing.T) {
			seed, feed := seededOrders(t)
			brokers, topic := feed.brokers, feed.topic
			feed.produce(300)
			env := []string{}
			if !fenced {
				env = append(env, unfencedOwnersEnv+"=1")
			}
			o := newOwnedScale(t, brokers, topic, env)
			zombie, other := o.start(0), o.start(1)
			kafkatest.WaitGroupShared(t, brokers, o.job+".owners", 2)
			feedFor(feed, time.Second)
			o.waitExact(feed, seed, "two runners")

			if err := zombie.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			delete(o.runners, 0)
			waitFor(t, other, 90*time.Second, "the other runner to own every bucket", func() bool {
				feedFor(feed, 100*time.Millisecond)
				_, st := readyScale(t, o.dirs[1])
				return st != nil && len(st.OwnedBuckets) == 8
			})
			if err := zombie.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			feedFor(feed, time.Second)
			conn := kafka.Connection{Brokers: brokers}
			if !fenced {
				deadline := time.Now().Add(60 * time.Second)
				for {
					err := repartition.CheckOwners(t.Context(), conn, o.repartition, 8, 5)
					if errors.Is(err, repartition.ErrTwoOwners) {
						t.Logf("caught: %v", err)
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("seed %d: CheckOwners = %v after the unfenced zombie resumed, want ErrTwoOwners; zombie's log:\n%s", seed, err, zombie.stderr.String())
					}
					feedFor(feed, 200*time.Millisecond)
				}
			}
			if code := zombie.exitCode(t, 60*time.Second); code != 1 {
				t.Fatalf("seed %d: the zombie: exit %d, want 1; log:\n%s", seed, code, zombie.stderr.String())
			}
			if want := "fenced: a newer owner took partition"; !strings.Contains(zombie.stderr.String(), want) {
				t.Fatalf("seed %d: the zombie does not say %q:\n%s", seed, want, zombie.stderr.String())
			}
			o.waitExact(feed, seed, "the zombie stopped")
			if err := repartition.CheckOwners(t.Context(), conn, o.repartition, 8, 5); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			stopGracefully(t, other)
		})
	}
}

// seededOrders logs the test's seed (-seed repeats it) and returns it with
// a feed of seeded orders into a new topic of 3 partitions on the test's
// brokers.
func seededOrders(t *testing.T) (int64, *orderFeed) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 3)
	return seed, &orderFeed{t: t, brokers: brokers, topic: topic, rng: rand.New(rand.NewSource(seed)), want: map[string]*userTotal{}}
}
