package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge/repartition"
)

// paymentFeed produces seeded payments {user, amount} of the orders'
// users into a topic of 3 partitions, and keeps their exact aggregates.
type paymentFeed struct {
	t       *testing.T
	brokers []string
	topic   string
	rng     *rand.Rand
	want    map[string][2]int64 // user → (paid, payments)
}

func (f *paymentFeed) produce(n int) {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		u := f.rng.Intn(40)
		user, amount := fmt.Sprintf("u%02d", u), int64(f.rng.Intn(500)+1)
		v, _ := json.Marshal(map[string]any{"user": user, "amount": amount})
		recs[i] = &kgo.Record{Topic: f.topic, Partition: int32(u % 3), Key: []byte(user), Value: v}
		w := f.want[user]
		f.want[user] = [2]int64{w[0] + amount, w[1] + 1}
	}
	kafkatest.Produce(f.t, f.brokers, recs...)
}

// sharedJobs is the orders job scaled with ownership group (the owner of
// table totals, its changelog written by the bucket owners) and an independent payments job writing its columns paid
// and payments through the owner's repartition topic (job.scale.owner),
// from job files of their own: the owner's runners load both files, the
// payments job's runner its own.
type sharedJobs struct {
	*ownedScale
	owner, payments string // the job files
}

// changelog is the topic of the owner job's table changelog.
func (o *ownedScale) changelog() string { return o.repartition + ".changelog" }

// sharedFiles writes the two job files into a temporary folder.
func sharedFiles(t *testing.T, o *ownedScale, orders, payments string) *sharedJobs {
	dir := t.TempDir()
	base, err := os.ReadFile("testdata/orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	brokers := "[" + strings.Join(o.brokers, ",") + "]"
	ownerYAML := strings.NewReplacer(
		"job: {name: orders, parallelism: 2}",
		fmt.Sprintf("job: {name: %s, parallelism: 2, scale: {mode: kafka, ownership: group, instance: 0, repartition_topic: %s, session_timeout: 6s}}", o.job, o.repartition),
		`["${KAFKA_BROKERS:-embedded}"]`, brokers,
		`["${ORDERS_TOPIC:-orders}"]`, "["+orders+"]",
		"      last:   {agg: last_value, from: seq}\n",
		fmt.Sprintf("      last:   {agg: last_value, from: seq}\n    changelog: {topic: %s, format: debezium-json}\n", o.changelog()),
	).Replace(string(base))
	paymentsYAML := fmt.Sprintf(`job:
  name: %s-payments
  scale: {mode: kafka, owner: %s, repartition_topic: %s, session_timeout: 6s}
source:
  kafka:
    brokers: %s
    topics: [%s]
    schema: {user: string, amount: int64}
key_by: [user]
sink:
  table:
    name: totals
    primary_key: [user]
    buckets: 8
    columns:
      paid: {agg: sum, from: amount}
      payments: {agg: count}
checkpoint: {interval: 200ms}
shutdown_timeout: 30s
`, o.job, o.job, o.repartition, brokers, payments)
	s := &sharedJobs{ownedScale: o, owner: filepath.Join(dir, "orders.yaml"), payments: filepath.Join(dir, "payments.yaml")}
	for path, text := range map[string]string{s.owner: ownerYAML, s.payments: paymentsYAML} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// startOwner runs instance i of the orders job, with the payments job's
// file, in its data directory (a new one on its first start).
func (s *sharedJobs) startOwner(i int) *child {
	if s.dirs[i] == "" {
		s.dirs[i] = s.t.TempDir()
	}
	c := start(s.t, s.env, "run", "-f", s.owner, "-f", s.payments, "--http-address", "127.0.0.1:0", "--summary", "0",
		"--data-dir", s.dirs[i], "--set", fmt.Sprintf("job.scale.instance=%d", i))
	s.runners[i] = c
	return c
}

// startPayments runs the payments job (its stage 1) in dir.
func (s *sharedJobs) startPayments(dir string) *child {
	return start(s.t, s.env, "run", "-f", s.payments, "--http-address", "127.0.0.1:0", "--summary", "0", "--data-dir", dir)
}

// diff says how rows differ from the exact aggregates of both jobs' inputs
// ("" when equal): the orders' columns as the single job's, the payments'
// paid and payments, null where a user has none.
func sharedDiff(rows map[string]map[string]any, orders *orderFeed, pays *paymentFeed) string {
	ofOrders := map[string]map[string]any{}
	for u, r := range rows {
		if _, ok := orders.want[u]; ok {
			ofOrders[u] = r
		} else if r["total"] != nil {
			return fmt.Sprintf("user %s: total %v, and no paid order", u, r["total"])
		}
		want, ok := pays.want[u]
		got := [2]string{fmt.Sprint(r["paid"]), fmt.Sprint(r["payments"])}
		switch {
		case !ok && (r["paid"] != nil || r["payments"] != nil):
			return fmt.Sprintf("user %s: paid %v in %v payments, and none made", u, got[0], got[1])
		case ok && got != [2]string{fmt.Sprint(want[0]), fmt.Sprint(want[1])}:
			return fmt.Sprintf("user %s: paid %v in %v payments, want %d in %d", u, got[0], got[1], want[0], want[1])
		}
	}
	for u := range pays.want {
		if rows[u] == nil {
			return fmt.Sprintf("user %s: no row, and payments made", u)
		}
	}
	return equalTotals(ofOrders, orders.want)
}

// waitExact waits until the live owner instances' tables together hold
// the exact aggregates of both inputs, no user twice.
func (s *sharedJobs) waitExact(orders *orderFeed, pays *paymentFeed, seed int64, what string) {
	s.t.Helper()
	last := ""
	for _, i := range s.live() {
		waitFor(s.t, s.runners[i], 90*time.Second, fmt.Sprintf("%s: the exact aggregates of both jobs over instances %v (seed %d): %s", what, s.live(), seed, last), func() bool {
			// A scan of a directory whose runner does not serve yet
			// opens it, and a runner starting meanwhile finds it locked.
			for _, j := range s.live() {
				if liveRunner(s.dirs[j]) == "" {
					last = fmt.Sprintf("instance %d does not serve", j)
					return false
				}
			}
			all := map[string]map[string]any{}
			for _, j := range s.live() {
				for u, r := range scanJSON(s.t, s.dirs[j], "totals", "user") {
					if _, dup := all[u]; dup {
						last = fmt.Sprintf("user %s in two tables", u)
						return false
					}
					all[u] = r
				}
			}
			last = sharedDiff(all, orders, pays)
			return last == ""
		})
	}
	s.t.Logf("%s: instances %v hold the exact aggregates of both jobs", what, s.live())
}

// feedBoth produces orders and payments at a seeded pace for d.
func feedBoth(orders *orderFeed, pays *paymentFeed, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		orders.produce(10 + orders.rng.Intn(40))
		pays.produce(10 + pays.rng.Intn(40))
		time.Sleep(time.Duration(10+orders.rng.Intn(40)) * time.Millisecond)
	}
}

// stopAndCheck stops the payments runner and every live owner gracefully;
// then table scan --all from the two job files (the owner log) and the
// committed changelog, replayed with each before-image checked, must hold
// the exact aggregates of both inputs, and the owner log's epochs must
// pass CheckOwners.
func (s *sharedJobs) stopAndCheck(payments *child, orders *orderFeed, pays *paymentFeed, seed int64) {
	t := s.t
	t.Helper()
	// Each owner publishes its buckets' seals with their changelog records.
	for _, i := range s.live() {
		series := []string{`ebbflow_repartition_seals_total{job="` + s.job + `"}`, `ebbflow_repartition_changelog_records_total{job="` + s.job + `"}`}
		waitFor(t, s.runners[i], 30*time.Second, fmt.Sprintf("instance %d's /metrics: %v at least 1", i, series), func() bool {
			_, metrics := httpGet(t, "http://"+liveRunner(s.dirs[i])+"/metrics")
			return metricAtLeast(metrics, series[0], 1) && metricAtLeast(metrics, series[1], 1)
		})
	}
	stopGracefully(t, payments)
	for _, i := range s.live() {
		stopGracefully(t, s.runners[i])
	}
	out, stderr, code := runCLIErr(t, nil, "table", "scan", "--all", "--table", "totals", "-o", "json", "-f", s.owner, "-f", s.payments)
	if code != 0 {
		t.Fatalf("seed %d: table scan --all from the job files: exit %d: %s", seed, code, stderr)
	}
	if d := sharedDiff(jsonRows(t, out, "user"), orders, pays); d != "" {
		t.Fatalf("seed %d: table scan --all from the job files: %s", seed, d)
	}
	if err := repartition.CheckOwners(t.Context(), kafka.Connection{Brokers: s.brokers}, s.repartition, 8, 7); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	recs := kafkatest.ConsumeStable(t, s.brokers, s.changelog())
	logged := map[string]map[string]any{}
	for _, row := range kafkatest.ReplayChecked(t, recs) {
		logged[fmt.Sprint(row["user"])] = row
	}
	if d := sharedDiff(logged, orders, pays); d != "" {
		t.Fatalf("seed %d: the committed changelog (%d records): %s", seed, len(recs), d)
	}
	t.Logf("the committed changelog: %d records, %d users", len(recs), len(logged))
}

// TestAbuseScaleIndependentJobs runs two jobs on one table
// (docs/SCALING.md, "Independent jobs on one table"): the orders job in two
// runners with ownership group, and the payments job, writing other
// columns, in a runner of its own (stage 1 only), its rows applied by the
// buckets' owners. Orders and payments keep arriving; one orders runner is
// killed with SIGKILL and started again, and the payments runner is
// restarted meanwhile. The owners' tables together hold the exact
// aggregates of both inputs, after the start and after the kill; once all
// stopped, table scan --all from the two job files (the owner log) does,
// and the owner log's epochs pass CheckOwners.
func TestAbuseScaleIndependentJobs(t *testing.T) {
	seed, orders := seededOrders(t)
	brokers := orders.brokers
	pays := &paymentFeed{t: t, brokers: brokers, topic: kafkatest.NewTopic(t, brokers, 3), rng: rand.New(rand.NewSource(seed + 1)), want: map[string][2]int64{}}
	feed := func(d time.Duration) { feedBoth(orders, pays, d) }
	orders.produce(200)
	pays.produce(200)
	s := sharedFiles(t, newOwnedScale(t, brokers, orders.topic, []string{syncWritesEnv + "=1"}), orders.topic, pays.topic)
	s.startOwner(0)
	s.startOwner(1)
	payDir := t.TempDir()
	payments := s.startPayments(payDir)
	kafkatest.WaitGroupShared(t, brokers, s.job+".owners", 2)
	feed(time.Second)
	s.waitExact(orders, pays, seed, "two owners and the payments job")

	victim := orders.rng.Intn(2)
	feed(time.Duration(200+orders.rng.Intn(600)) * time.Millisecond)
	if err := s.runners[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.runners[victim].exitCode(t, 30*time.Second)
	delete(s.runners, victim)
	t.Logf("owner instance %d killed", victim)
	stopGracefully(t, payments)
	feed(500 * time.Millisecond)
	payments = s.startPayments(payDir)
	s.startOwner(victim)
	feed(time.Second)
	kafkatest.WaitGroupShared(t, brokers, s.job+".owners", 2)
	s.waitExact(orders, pays, seed, fmt.Sprintf("instance %d killed and started again, the payments job restarted", victim))

	s.stopAndCheck(payments, orders, pays, seed)
	t.Logf("seed %d: %d orders, %d payment users", seed, orders.seq, len(pays.want))
}

var sharedRoundsFlag = flag.Int("shared-rounds", 1, "rounds of kills, additions and removals in TestAbuseScaleSharedTopology (docs/SCALING.md: 10 for a long run)")

// TestAbuseScaleSharedTopology is issue #14's whole deployment: the orders
// job in three runners with ownership group and the independent payments
// job in a runner of its own, writing other columns of the same table,
// while orders and payments keep arriving. Each round (-shared-rounds, 1
// here) SIGKILLs a seeded random owner instance and starts it again, adds
// a new instance, stops another one for good (a removal: it leaves the
// group after its final checkpoint and publish) and restarts the payments
// job; after each step the live owners' tables together hold the exact
// aggregates of both inputs, no user twice. Once all stopped, table scan
// --all from the two job files (the owner log) holds them too, and the
// owner log's epochs show no bucket applied by two owners at once
// (CheckOwners).
func TestAbuseScaleSharedTopology(t *testing.T) {
	seed, orders := seededOrders(t)
	brokers := orders.brokers
	pays := &paymentFeed{t: t, brokers: brokers, topic: kafkatest.NewTopic(t, brokers, 3), rng: rand.New(rand.NewSource(seed + 1)), want: map[string][2]int64{}}
	rng := orders.rng
	feed := func(d time.Duration) { feedBoth(orders, pays, d) }
	orders.produce(200)
	pays.produce(200)
	s := sharedFiles(t, newOwnedScale(t, brokers, orders.topic, []string{syncWritesEnv + "=1"}), orders.topic, pays.topic)
	for i := range 3 {
		s.startOwner(i)
	}
	payDir := t.TempDir()
	payments := s.startPayments(payDir)
	kafkatest.WaitGroupShared(t, brokers, s.job+".owners", 3)
	feed(time.Second)
	s.waitExact(orders, pays, seed, "three owners and the payments job")

	next := 3 // the next new instance's number
	pick := func() int { live := s.live(); return live[rng.Intn(len(live))] }
	for round := range *sharedRoundsFlag {
		victim := pick()
		feed(time.Duration(200+rng.Intn(800)) * time.Millisecond)
		if err := s.runners[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s.runners[victim].exitCode(t, 30*time.Second)
		delete(s.runners, victim)
		feed(time.Duration(200+rng.Intn(800)) * time.Millisecond)
		s.startOwner(victim)
		kafkatest.WaitGroupShared(t, brokers, s.job+".owners", len(s.runners))
		s.waitExact(orders, pays, seed, fmt.Sprintf("round %d: instance %d killed and started again", round+1, victim))

		s.startOwner(next)
		next++
		feed(time.Duration(200+rng.Intn(800)) * time.Millisecond)
		kafkatest.WaitGroupShared(t, brokers, s.job+".owners", len(s.runners))
		s.waitExact(orders, pays, seed, fmt.Sprintf("round %d: instance %d added", round+1, next-1))

		gone := pick()
		stopGracefully(t, s.runners[gone])
		delete(s.runners, gone)
		stopGracefully(t, payments)
		feed(time.Duration(200+rng.Intn(800)) * time.Millisecond)
		payments = s.startPayments(payDir)
		kafkatest.WaitGroupShared(t, brokers, s.job+".owners", len(s.runners))
		s.waitExact(orders, pays, seed, fmt.Sprintf("round %d: instance %d removed, the payments job restarted", round+1, gone))
	}

	s.stopAndCheck(payments, orders, pays, seed)
	t.Logf("seed %d: %d rounds; %d orders, %d payment users", seed, *sharedRoundsFlag, orders.seq, len(pays.want))
}
