package build

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

var tsSeed = flag.Uint64("ts-seed", 0, "seed of the timestamp-barrier tests (0: from the clock)")

// tsJobs is chainJobs with A at parallelism 2, with event time from the
// field at (Unix ms; the input's 2 partitions out of order within 2 s),
// its versions cut as %[5]s, and B reading A's changelog aligned on A's
// versions.
var tsJobs = func() string {
	a, b, _ := strings.Cut(chainJobs, "---")
	for old, new := range map[string]string{
		"job: {name: users}": "job: {name: users, parallelism: 2}",
		"schema: {user: string, region: string, amount: int64}": "schema: {user: string, region: string, amount: int64, at: int64}\n" +
			"    event_time: {field: at, max_out_of_orderness: 2s, idle_timeout: 300ms}",
	} {
		a = strings.Replace(a, old, new, 1)
	}
	return a + "%[5]s\n---" + strings.Replace(b, "format: upsert-json\n", "format: upsert-json\n    align: versions\n", 1)
}()

// The versions of A in tsJobs: on event-time boundaries 1 s apart, or (the
// bite) at every checkpoint.
const (
	tsByEventTime  = "versions: {by: event_time, every: 1s}"
	tsByCheckpoint = "versions: {by: checkpoint}"
)

// tsT0 is the first event time of the input: on a boundary.
var tsT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// tsOrder is one input record.
type tsOrder struct {
	user, region string
	amount, at   int64 // at: event time, Unix ms
	partition    int32
}

// tsInput makes 90 batches of 20 orders of 30 users, batch k at event
// times in (base-1.5s, base] with base tsT0 + k·200ms, over partitions 0
// and 1 until batch 60 and only partition 0 after: out of order within the
// 2 s bound of every partition, and the boundaries past partition 1's last
// watermark are passed only once it is idle.
func tsInput(rng *rand.Rand) [][]tsOrder {
	regions := []string{"eu", "us", "asia"}
	batches := make([][]tsOrder, 90)
	for k := range batches {
		base := tsT0 + int64(k)*200
		for range 20 {
			p := int32(rng.IntN(2))
			if k >= 60 {
				p = 0
			}
			u := rng.IntN(30)
			batches[k] = append(batches[k], tsOrder{user: fmt.Sprintf("u%d", u), region: regions[u%3],
				amount: int64(rng.IntN(9) + 1), at: base - rng.Int64N(1500), partition: p})
		}
	}
	return batches
}

// tsLastBoundary is the last boundary the job's watermark passes with the
// input ended: partition 1 idle, partition 0's watermark its largest event
// time minus the bound minus 1 ns.
func tsLastBoundary(batches [][]tsOrder) int64 {
	top := int64(0)
	for _, b := range batches {
		for _, o := range b {
			if o.partition == 0 {
				top = max(top, o.at)
			}
		}
	}
	wm := top*int64(time.Millisecond) - int64(2*time.Second) - 1 // ns
	return wm / int64(time.Second) * 1000
}

func tsProduce(t *testing.T, brokers []string, topic string, b []tsOrder) {
	t.Helper()
	recs := make([]*kgo.Record, len(b))
	for i, o := range b {
		recs[i] = &kgo.Record{Topic: topic, Partition: o.partition, Key: []byte(o.user),
			Value: fmt.Appendf(nil, `{"user":%q,"region":%q,"amount":%d,"at":%d}`, o.user, o.region, o.amount, o.at)}
	}
	kafkatest.Produce(t, brokers, recs...)
}

// tsRun is a topology A → B on one data directory, run in lives.
type tsRun struct {
	brokers            []string
	in, aTopic, bTopic string
	dir, spec          string
	orders             []tsOrder // produced so far
	as, bs             []export.Version
	lives, crashes     int
}

func newTSRun(t *testing.T, versions string) *tsRun {
	brokers := kafkatest.Brokers(t)
	r := &tsRun{brokers: brokers, in: kafkatest.NewTopic(t, brokers, 2), aTopic: kafkatest.TopicName(t, brokers),
		bTopic: kafkatest.TopicName(t, brokers), dir: t.TempDir()}
	r.spec = fmt.Sprintf(tsJobs, strings.Join(brokers, ","), r.in, r.aTopic, r.bTopic, versions)
	return r
}

// life starts A and B in a new Env, runs during, then ends them: crashed
// (their context cancelled: no final checkpoint, undo on the next start)
// or stopped (a final checkpoint, between two boundaries).
func (r *tsRun) life(t *testing.T, crash bool, during func(e *Env)) {
	t.Helper()
	ps, err := pipelines.Load([]pipelines.File{{Name: "ts.yaml", Data: []byte(r.spec)}}, pipelines.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEnv(Options{DataDir: r.dir, Logger: testLogger()})
	if err := e.OpenTables(ps); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs, dones, exported := startJobs(t, ctx, e, ps)
	during(e)
	var errs []error
	if crash {
		cancel()
		r.crashes++
	}
	for i, j := range jobs {
		if !crash {
			j.Stop()
		}
		if err := <-dones[i]; err != nil && !(crash && errors.Is(err, context.Canceled)) {
			errs = append(errs, fmt.Errorf("job %s: %w", j.Name(), err))
		}
	}
	cancel()
	if err := <-exported; err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, err)
	}
	errs = append(errs, e.Close())
	r.lives++
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// produce writes batches, one every 10 ms.
func (r *tsRun) produce(t *testing.T, batches [][]tsOrder) {
	for _, b := range batches {
		tsProduce(t, r.brokers, r.in, b)
		r.orders = append(r.orders, b...)
		time.Sleep(10 * time.Millisecond)
	}
}

// readVersions reads A's and B's versions.
func (r *tsRun) readVersions(t *testing.T) {
	t.Helper()
	conn := kafka.Connection{Brokers: r.brokers}
	var err error
	if r.as, err = export.ReadVersions(context.Background(), conn, r.aTopic+".versions"); err != nil {
		t.Fatal(err)
	}
	if r.bs, err = export.ReadVersions(context.Background(), conn, r.bTopic+".versions"); err != nil {
		t.Fatal(err)
	}
}

// awaitBoundary waits, with no more input, until A and B each published a
// version at event time last (B's naming A's): the last boundary is cut
// without a later record or checkpoint to push it out.
func (r *tsRun) awaitBoundary(t *testing.T, last int64) {
	t.Helper()
	at := func(vs []export.Version) bool {
		return slices.ContainsFunc(vs, func(v export.Version) bool { return v.EventTimeMs == last })
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.readVersions(t)
		if at(r.as) && at(r.bs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no version at the last boundary %d after 60 s without input: A's newest %+v, B's newest %+v",
				last, newest(r.as), newest(r.bs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newest(vs []export.Version) export.Version {
	if len(vs) == 0 {
		return export.Version{}
	}
	return vs[len(vs)-1]
}

// tsUsers is the plain model of A: per user the region and the total of
// the orders at or before event time t (Unix ms).
func tsUsers(orders []tsOrder, t int64) map[string][2]any {
	totals := map[string]float64{}
	out := map[string][2]any{}
	for _, o := range orders {
		if o.at <= t {
			totals[o.user] += float64(o.amount)
			out[o.user] = [2]any{o.region, totals[o.user]}
		}
	}
	return out
}

// tsRegions is the model of B at t: per region the sum of the users'
// totals and the number of users.
func tsRegions(orders []tsOrder, t int64) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, u := range tsUsers(orders, t) {
		s := out[u[0].(string)]
		out[u[0].(string)] = [2]float64{s[0] + u[1].(float64), s[1] + 1}
	}
	return out
}

// violations checks the timestamp barrier's promise on every version of A
// and B: version t holds exactly the aggregate of the input with an event
// time at or before t (t on a boundary, a multiple of 1 s), and B's
// version carries the event time of the version of A it names. It returns
// one line per version that is not so.
func (r *tsRun) violations(t *testing.T) []string {
	t.Helper()
	aLog := kafkatest.ConsumeStable(t, r.brokers, r.aTopic)
	bLog := kafkatest.ConsumeStable(t, r.brokers, r.bTopic)
	byNumber := map[uint64]export.Version{}
	var bad []string
	for _, v := range r.as {
		byNumber[v.Version] = v
		if v.EventTimeMs <= 0 || v.EventTimeMs%1000 != 0 {
			bad = append(bad, fmt.Sprintf("A's version %d at event time %d: not a boundary", v.Version, v.EventTimeMs))
			continue
		}
		got := map[string][2]any{}
		for _, row := range kafkatest.Replay(t, aLog, v.EndOffsets, false) {
			got[row["user"].(string)] = [2]any{row["region"], row["total"]}
		}
		if want := tsUsers(r.orders, v.EventTimeMs); !maps.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("A's version %d at event time %d: %d users %v, the input up to it: %d users %v",
				v.Version, v.EventTimeMs, len(got), got, len(want), want))
		}
	}
	for _, v := range r.bs {
		if len(v.Upstream) != 1 {
			t.Fatalf("B's version %d names %+v", v.Version, v.Upstream)
		}
		up := v.Upstream[0]
		if up.Version == 0 {
			if v.EventTimeMs != 0 || len(kafkatest.Replay(t, bLog, v.EndOffsets, false)) > 0 {
				bad = append(bad, fmt.Sprintf("B's version %d names no version of A, at event time %d", v.Version, v.EventTimeMs))
			}
			continue
		}
		if a, ok := byNumber[up.Version]; !ok || !up.Exact || a.EventTimeMs != v.EventTimeMs {
			bad = append(bad, fmt.Sprintf("B's version %d at event time %d names %+v (A's: %+v)", v.Version, v.EventTimeMs, up, a))
			continue
		}
		got := regionRows(kafkatest.Replay(t, bLog, v.EndOffsets, false))
		if want := tsRegions(r.orders, v.EventTimeMs); !maps.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("B's version %d at event time %d: %v, the input up to it: %v", v.Version, v.EventTimeMs, got, want))
		}
	}
	return bad
}

// boundaries lists the distinct event times of vs after tsT0, in ms (the
// versions that name no boundary left out).
func boundaries(vs []export.Version) []int64 {
	var out []int64
	for _, v := range vs {
		if v.EventTimeMs >= tsT0 {
			out = append(out, v.EventTimeMs-tsT0)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func tsRand(t *testing.T) *rand.Rand {
	seed := *tsSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-ts-seed %d repeats the input and the crashes, not the timing)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// TestTimestampBarrier runs A → B with A's versions cut on 1 s
// event-time boundaries (parallelism 2, out-of-order input within the
// bound): every version t of A and of B holds exactly the aggregate of the
// input with an event time at or before t, and once the input stops the
// last boundary its watermark passes is published (with partition 1 idle:
// by its idle timeout) without a later record.
func TestTimestampBarrier(t *testing.T) {
	rng := tsRand(t)
	r := newTSRun(t, tsByEventTime)
	batches := tsInput(rng)
	last := tsLastBoundary(batches)
	r.life(t, false, func(*Env) {
		r.produce(t, batches)
		r.awaitBoundary(t, last)
	})
	r.readVersions(t)
	if bad := r.violations(t); len(bad) > 0 {
		t.Fatalf("%d of %d versions break the timestamp barrier:\n%s", len(bad), len(r.as)+len(r.bs), strings.Join(bad, "\n"))
	}
	if v := newest(r.as); v.EventTimeMs != last {
		t.Fatalf("A's newest version at %d, past the last boundary %d", v.EventTimeMs, last)
	}
	t.Logf("A: %d versions at %v ms after t0; B: %d at %v", len(r.as), boundaries(r.as), len(r.bs), boundaries(r.bs))
}

// TestTimestampBarrierBite: the same topology with A's versions cut at its
// checkpoints: a version's event time is then A's watermark, and its
// content holds records past it (and, out of order, misses none before
// it): the check above finds versions that break the promise.
func TestTimestampBarrierBite(t *testing.T) {
	rng := tsRand(t)
	r := newTSRun(t, tsByCheckpoint)
	batches := tsInput(rng)
	r.life(t, false, func(*Env) {
		r.produce(t, batches)
		deadline := time.Now().Add(60 * time.Second)
		// Until B names a version of A that holds every order.
		want := tsRegions(r.orders, tsT0+time.Hour.Milliseconds())
		for {
			r.readVersions(t)
			if v := newest(r.bs); len(r.bs) > 0 && maps.Equal(regionRows(kafkatest.Replay(t,
				kafkatest.ConsumeStable(t, r.brokers, r.bTopic), v.EndOffsets, false)), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("B does not reach the input's totals")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	// Their event times are no boundaries either; what counts is content
	// that is not the input up to the version's event time.
	bad := slices.DeleteFunc(r.violations(t), func(s string) bool { return !strings.Contains(s, "the input up to it") })
	if len(bad) == 0 {
		t.Fatalf("versions cut at checkpoints kept the timestamp barrier's promise (%d of A, %d of B): the check cannot tell", len(r.as), len(r.bs))
	}
	t.Logf("%d of %d versions cut at checkpoints hold other than the input up to their event time, e.g. %.300s", len(bad), len(r.as)+len(r.bs), bad[0])
}

// TestTimestampBarrierRestore runs A → B in lives that end at seeded
// random moments while input arrives: crashed (no final checkpoint: the
// next life undoes and replays, held-back records included) or stopped
// (a final checkpoint between two boundaries, whose held-back records the
// next life reads again and hands out once). Every version of every life
// keeps the promise, numbers only grow, and the last boundary is
// published.
func TestTimestampBarrierRestore(t *testing.T) {
	rng := tsRand(t)
	r := newTSRun(t, tsByEventTime)
	batches := tsInput(rng)
	last := tsLastBoundary(batches)
	for len(batches) > 0 {
		n := min(len(batches), 5+rng.IntN(20))
		crash := rng.IntN(2) == 0
		if n == len(batches) {
			crash = false
		}
		part := batches[:n]
		batches = batches[n:]
		r.life(t, crash, func(*Env) {
			r.produce(t, part)
			if len(batches) == 0 {
				r.awaitBoundary(t, last)
			}
		})
	}
	r.readVersions(t)
	if bad := r.violations(t); len(bad) > 0 {
		t.Fatalf("%d of %d versions break the timestamp barrier after %d lives (%d crashed):\n%s",
			len(bad), len(r.as)+len(r.bs), r.lives, r.crashes, strings.Join(bad, "\n"))
	}
	for _, vs := range [][]export.Version{r.as, r.bs} {
		for i := 1; i < len(vs); i++ {
			if vs[i].Version <= vs[i-1].Version {
				t.Fatalf("version %d after %d", vs[i].Version, vs[i-1].Version)
			}
		}
	}
	t.Logf("%d lives (%d crashed); A: %d versions at %v ms after t0; B: %d at %v", r.lives, r.crashes,
		len(r.as), boundaries(r.as), len(r.bs), boundaries(r.bs))
}
