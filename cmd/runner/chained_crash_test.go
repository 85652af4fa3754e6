package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// Environment variables of a runner child (see TestMain): syncWritesEnv
// makes its table writes durable at once (build.Options.SyncTableWrites),
// so that a SIGKILL leaves writes past the last checkpoint for undo (with
// unsynced writes a kill loses most of them, and undo has little to do);
// skipUndoEnv turns undo off (build.Options.UnsafeSkipUndo): the bite
// test's broken job B.
const (
	syncWritesEnv = "EBBFLOW_TEST_SYNC_TABLE_WRITES"
	skipUndoEnv   = "EBBFLOW_TEST_UNSAFE_SKIP_UNDO"
)

// chainedKills is how often each runner of TestChainedSIGKILL is killed.
func chainedKills() int { return max(*killsFlag, 10) }

// TestChainedSIGKILL runs examples/chained: job A (orders from a topic
// this test produces into → totals per user, changelog published) and job
// B (A's changelog → sum of totals and count of users per region), each in
// a runner process of its own, and kills each with SIGKILL at independent
// seeded random moments (at least 10 times each; -kills for more) while
// orders keep arriving. Then both run to the end: A's table must equal the
// exact totals of the input, and B's table the exact aggregate of that
// expected table.
func TestChainedSIGKILL(t *testing.T) {
	ch := newChain(t)
	ch.crash(chainedKills(), chainedKills())
	// A kill may land while a job has written nothing since its last
	// checkpoint (B, fed by A's commits, often is so on a loaded machine:
	// CI once saw 10 kills of B and no key to undo): kill a job whose undo
	// has restored nothing yet 4 times more, at most 5 rounds.
	for round := 0; round < 5 && (ch.a.restored() == 0 || ch.b.restored() == 0); round++ {
		more := func(r *jobProc) int {
			if r.restored() == 0 {
				return r.kills + 4
			}
			return r.kills
		}
		ch.crash(more(ch.a), more(ch.b))
	}
	if d := ch.settle(90 * time.Second); d != "" {
		t.Fatalf("seed %d: %s", ch.seed, d)
	}
	ch.stop()
	if d := ch.diff(); d != "" {
		t.Fatalf("seed %d: after a graceful stop: %s", ch.seed, d)
	}
	if d := ch.diffChangelog(); d != "" {
		t.Fatalf("seed %d: A's committed changelog: %s", ch.seed, d)
	}
	t.Logf("seed %d: A killed %d times (undo restored %d keys), B %d times (%d keys); %d orders, %d users, %d regions", ch.seed,
		ch.a.kills, ch.a.undone, ch.b.kills, ch.b.undone, ch.orders, len(ch.users), len(ch.regions()))
	if ch.a.undone == 0 || ch.b.undone == 0 {
		t.Fatalf("seed %d: undo restored %d keys of A and %d of B: the kills left nothing to undo, so the test proved little", ch.seed, ch.a.undone, ch.b.undone)
	}
}

// TestChainedSIGKILLBites runs the same chain with a job B whose writer
// skips undo (at-least-once) and kills only B: the checks of
// TestChainedSIGKILL must then find B's table wrong, or they prove nothing.
func TestChainedSIGKILLBites(t *testing.T) {
	ch := newChain(t)
	ch.b.env = append(ch.b.env, skipUndoEnv+"=1")
	// A kill may land while B has written nothing since its checkpoint, and
	// then costs nothing to skip undo: kill B in rounds of 4 until its table
	// goes wrong (it stays wrong), at most 3 rounds.
	var d string
	for round := 0; round < 3 && d == ""; round++ {
		ch.crash(0, ch.b.kills+4)
		d = ch.settle(60 * time.Second)
	}
	ch.stop()
	if d == "" {
		d = ch.diff()
	}
	if d == "" {
		t.Fatalf("seed %d: B skipped undo after %d kills, and its table still looks exact: the check cannot fail", ch.seed, ch.b.kills)
	}
	t.Logf("seed %d: detected, as it must be: %s", ch.seed, d)
}

// chain is the A → changelog → B (→ changelog → C) setup of one test.
type chain struct {
	t         *testing.T
	seed      int64
	rng       *rand.Rand
	topic     string // A's input
	brokers   []string
	changelog string // A's changelog topic
	format    export.Format
	bLog      string // B's changelog topic
	prod      *kgo.Client
	a, b      *jobProc
	c         *jobProc // nil but in a three-job chain (addC)
	orders    int
	users     map[string]*userSum // A's expected table
}

type userSum struct {
	total, orders int64
	region        string
}

// jobProc is one job's runner process, restarted after each kill.
type jobProc struct {
	name, dir, table, key string
	args, env             []string
	c                     *child
	kills                 int
	undone                int // keys restored by undo, over all restarts
	killAt, startAt       time.Time
	killAfter             time.Duration // from when the runner answers to its kill
}

var keysRestored = regexp.MustCompile(`msg="undo finished" .* keys_restored=(\d+)`)

// undoneKeys adds up the keys a runner's undo restored, from its log.
func undoneKeys(c *child) int {
	sum := 0
	for _, m := range keysRestored.FindAllStringSubmatch(c.stderr.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		sum += n
	}
	return sum
}

// restored is the keys r's undo restored so far, the running life's
// (its start undid the last kill's writes) included.
func (r *jobProc) restored() int {
	if r.c == nil {
		return r.undone
	}
	return r.undone + undoneKeys(r.c)
}

// ended adds up the undo of the runner's last life.
func (r *jobProc) ended() {
	r.undone += undoneKeys(r.c)
	r.c = nil
}

func newChain(t *testing.T) *chain {
	seed := crashtest.Seed(t, *seedFlag)
	brokers := kafkatest.Brokers(t)
	ch := &chain{t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), brokers: brokers,
		topic: kafkatest.NewTopic(t, brokers, 3), users: map[string]*userSum{}}
	ch.prod = kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// The changelog topic is made here, with a partition per bucket of
	// user_totals, so that B finds it from its first start and the test
	// deletes it at the end.
	changelog := kafkatest.NewTopic(t, brokers, 4)
	// The seed picks the changelog's format: both must chain exactly.
	format := []string{"upsert-json", "debezium-json"}[seed&1]
	t.Logf("seed %d: changelog format %s", seed, format)
	ch.changelog, ch.format = changelog, export.Format(format)
	ch.bLog = kafkatest.NewTopic(t, brokers, 4) // region_stats' buckets
	common := []string{"--http-address", "127.0.0.1:0", "--summary", "0"}
	list := "[" + strings.Join(brokers, ",") + "]"
	ch.a = &jobProc{name: "A", dir: t.TempDir(), table: "user_totals", key: "user", env: []string{syncWritesEnv + "=1"},
		args: slices.Concat([]string{"run", "-f", "../../examples/chained/a.yaml"}, common, []string{
			"--set", fmt.Sprintf(`source={kafka: {brokers: %s, topics: [%s], schema: {order_id: int64, user: string, region: string, amount: int64}}}`,
				list, ch.topic),
			"--set", "sink.table.changelog.brokers=" + list,
			"--set", "sink.table.changelog.topic=" + changelog,
			"--set", "sink.table.changelog.format=" + format,
			"--set", "checkpoint.interval=200ms"})}
	// B reads unaligned unless a test sets source.kafka.align=versions
	// (the example's).
	ch.b = &jobProc{name: "B", dir: t.TempDir(), table: "region_stats", key: "region", env: []string{syncWritesEnv + "=1"},
		args: slices.Concat([]string{"run", "-f", "../../examples/chained/b.yaml"}, common, []string{
			"--set", "source.kafka.brokers=" + list,
			"--set", "source.kafka.topics=[" + changelog + "]",
			"--set", "source.kafka.format=" + format,
			"--set", "source.kafka.align=none",
			"--set", "sink.table.changelog.brokers=" + list,
			"--set", "sink.table.changelog.topic=" + ch.bLog,
			"--set", "checkpoint.interval=500ms"})}
	return ch
}

// addC adds job C of examples/chained (B's changelog → grand total,
// aligned on B's versions, its changelog published to the topic it
// returns) in a runner process of its own, checkpointing every interval.
func (ch *chain) addC(interval time.Duration) string {
	cLog := kafkatest.NewTopic(ch.t, ch.brokers, 1) // grand_total's bucket
	list := "[" + strings.Join(ch.brokers, ",") + "]"
	ch.c = &jobProc{name: "C", dir: ch.t.TempDir(), table: "grand_total", key: "scope", env: []string{syncWritesEnv + "=1"},
		args: []string{"run", "-f", "../../examples/chained/c.yaml", "--http-address", "127.0.0.1:0", "--summary", "0",
			"--set", "source.kafka.brokers=" + list,
			"--set", "source.kafka.topics=[" + ch.bLog + "]",
			"--set", "sink.table.changelog.brokers=" + list,
			"--set", "sink.table.changelog.topic=" + cLog,
			"--set", "checkpoint.interval=" + interval.String()}}
	return cLog
}

// runners are the chain's job processes: A, B and, if added, C.
func (ch *chain) runners() []*jobProc {
	if ch.c == nil {
		return []*jobProc{ch.a, ch.b}
	}
	return []*jobProc{ch.a, ch.b, ch.c}
}

// produce writes n seeded orders and adds them to A's expected table. A
// user's orders go to one partition, so A reads them in order and the last
// region is well defined.
func (ch *chain) produce(n int) {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		user := fmt.Sprintf("u%02d", ch.rng.Intn(30))
		region := []string{"eu", "us", "asia", "africa"}[ch.rng.Intn(4)]
		amount := int64(ch.rng.Intn(500) + 1)
		v, _ := json.Marshal(map[string]any{"order_id": ch.orders, "user": user, "region": region, "amount": amount})
		h := fnv.New32a()
		h.Write([]byte(user))
		recs[i] = &kgo.Record{Topic: ch.topic, Partition: int32(h.Sum32() % 3), Key: []byte(user), Value: v}
		u := ch.users[user]
		if u == nil {
			u = &userSum{}
			ch.users[user] = u
		}
		u.total += amount
		u.orders++
		u.region = region
		ch.orders++
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkatest.Timeout)
	defer cancel()
	if err := ch.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		ch.t.Fatalf("produce: %v", err)
	}
}

// crash runs the runners while orders arrive, killing the i-th of
// ch.runners() kills[i] times, each at its own random moments (0.3 to 1.8 s
// after it answered, restarted up to 0.3 s later). It returns with all
// running.
func (ch *chain) crash(kills ...int) {
	t, rs := ch.t, ch.runners()
	if len(kills) != len(rs) {
		t.Fatalf("crash: %d kill counts for %d runners", len(kills), len(rs))
	}
	limit := max(3*time.Minute, time.Duration(slices.Max(kills))*3*time.Second)
	deadline := time.Now().Add(limit)
	ch.produce(200)
	for {
		done := true
		var progress []string
		for i, r := range rs {
			done = done && r.kills >= kills[i] && r.c != nil
			progress = append(progress, fmt.Sprintf("%s %d/%d", r.name, r.kills, kills[i]))
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("seed %d: kill schedule not done after %s (kills: %s)", ch.seed, limit, strings.Join(progress, ", "))
		}
		ch.produce(5 + ch.rng.Intn(30))
		time.Sleep(time.Duration(5+ch.rng.Intn(20)) * time.Millisecond)
		for i, r := range rs {
			ch.step(r, kills[i])
		}
	}
}

// step starts r when it is down and due, and kills it when it is up, due,
// and has kills left.
func (ch *chain) step(r *jobProc, kills int) {
	t, now := ch.t, time.Now()
	if r.c == nil {
		if now.After(r.startAt) {
			r.c = start(t, r.env, append(slices.Clone(r.args), "--data-dir", r.dir)...)
			r.killAt, r.killAfter = time.Time{}, time.Duration(300+ch.rng.Intn(1500))*time.Millisecond
		}
		return
	}
	select {
	case <-r.c.done:
		t.Fatalf("seed %d: runner %s exited by itself: %v; log:\n%s", ch.seed, r.name, r.c.err, r.c.stderr.String())
	default:
	}
	if r.kills >= kills {
		return
	}
	if r.killAt.IsZero() {
		// The kill's moment counts from when the runner answers: on a
		// loaded machine a start can outlast the whole window, and a kill
		// during it leaves nothing to undo.
		if e, _ := findRunner(r.dir, ""); e != nil {
			r.killAt = now.Add(r.killAfter)
		}
		return
	}
	if now.Before(r.killAt) {
		return
	}
	if err := r.c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.c.exitCode(t, 30*time.Second)
	r.ended()
	r.kills++
	r.startAt = now.Add(time.Duration(ch.rng.Intn(300)) * time.Millisecond)
}

// settle produces the last orders and waits until both tables are right
// (""), or B's table stayed the same for 5 s once A's is right, or the
// timeout passed: then it returns the difference.
func (ch *chain) settle(timeout time.Duration) string {
	ch.produce(300)
	deadline := time.Now().Add(timeout)
	var last map[string]map[string]any
	var quiet time.Time
	for {
		d := ch.diffA(ch.scan(ch.a))
		if d == "" {
			b := ch.scan(ch.b)
			if d = ch.diffB(b); d == "" {
				return ""
			}
			if !sameRows(b, last) {
				last, quiet = b, time.Now()
			} else if time.Since(quiet) > 5*time.Second {
				return "B settled wrong: " + d
			}
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("not right after %s: %s", timeout, d)
		}
		ch.running()
		time.Sleep(200 * time.Millisecond)
	}
}

// running fails the test if a runner exited.
func (ch *chain) running() {
	for _, r := range ch.runners() {
		select {
		case <-r.c.done:
			ch.t.Fatalf("seed %d: runner %s exited: %v; log:\n%s", ch.seed, r.name, r.c.err, r.c.stderr.String())
		default:
		}
	}
}

// scan reads r's table through its running runner's API.
func (ch *chain) scan(r *jobProc) map[string]map[string]any {
	if r.c != nil && liveRunner(r.dir) == "" {
		return nil // not serving yet
	}
	return scanJSON(ch.t, r.dir, r.table, r.key)
}

// stop stops the runners gracefully (exit 0).
func (ch *chain) stop() {
	for _, r := range ch.runners() {
		stopGracefully(ch.t, r.c)
		r.ended()
	}
}

// diff compares both tables, read from their data directories.
func (ch *chain) diff() string {
	if d := ch.diffA(ch.scan(ch.a)); d != "" {
		return d
	}
	return ch.diffB(ch.scan(ch.b))
}

func (ch *chain) diffA(got map[string]map[string]any) string {
	if len(got) != len(ch.users) {
		return fmt.Sprintf("A: %d users, want %d", len(got), len(ch.users))
	}
	for user, w := range ch.users {
		g := got[user]
		have := userSum{total: num(g["total"]), orders: num(g["orders"]), region: fmt.Sprint(g["region"])}
		if have != *w {
			return fmt.Sprintf("A: user %s: got %+v, want %+v", user, have, *w)
		}
	}
	return ""
}

type regionSum struct{ total, users int64 }

// regions is B's expected table: A's expected table grouped by region.
func (ch *chain) regions() map[string]regionSum {
	want := map[string]regionSum{}
	for _, u := range ch.users {
		r := want[u.region]
		r.total += u.total
		r.users++
		want[u.region] = r
	}
	return want
}

// diffB compares B's table with the exact aggregate of A's expected table.
// A region all of whose users moved away stays in B's table with total 0
// and 0 users (retracted, not deleted): that is an empty group.
func (ch *chain) diffB(got map[string]map[string]any) string {
	want := ch.regions()
	for region, g := range got {
		have := regionSum{total: num(g["total"]), users: num(g["users"])}
		if w := want[region]; have != w {
			return fmt.Sprintf("B: region %s: got %+v, want %+v", region, have, w)
		}
	}
	for region, w := range want {
		if _, ok := got[region]; !ok {
			return fmt.Sprintf("B: no region %s, want %+v", region, w)
		}
	}
	return ""
}

func num(v any) int64 {
	n, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
	return n
}

func sameRows(a, b map[string]map[string]any) bool {
	if len(a) != len(b) || a == nil || b == nil {
		return false
	}
	for k, ra := range a {
		rb, ok := b[k]
		if !ok || fmt.Sprint(ra) != fmt.Sprint(rb) {
			return false
		}
	}
	return true
}

// diffChangelog reads A's changelog topic as a read_committed consumer
// would (export.Read) and checks what committed mode promises after any
// number of crashes: per partition the log offsets only grow (no record
// twice), no undo record (a crash's rollback is never exported), every
// user's order count only grows from one record to the next (no value that
// was later undone), and applying the records gives A's expected table.
func (ch *chain) diffChangelog() string {
	kafkatest.WaitStable(ch.t, ch.brokers, ch.changelog)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lastOffset := map[int]uint64{}
	rows := map[string]userSum{}
	records := 0
	err := export.Read(ctx, export.ReaderConfig{Kafka: kafka.Connection{Brokers: ch.brokers}, Topic: ch.changelog, Format: ch.format},
		func(c export.Change) error {
			records++
			// an update is read as -U then +U of one record
			last, seen := lastOffset[c.Bucket]
			if c.Kind == runtime.RowUpdateAfter && c.LogOffset != last || c.Kind != runtime.RowUpdateAfter && seen && c.LogOffset <= last {
				return fmt.Errorf("partition %d: log offset %d (%v) after %d", c.Bucket, c.LogOffset, c.Kind, last)
			}
			lastOffset[c.Bucket] = c.LogOffset
			if c.Undo {
				return fmt.Errorf("partition %d offset %d: an undo record in committed mode after crashes", c.Bucket, c.LogOffset)
			}
			user := c.Key.Map()["user"].(string)
			m := c.Row.Map()
			have := userSum{total: num(m["total"]), orders: num(m["orders"]), region: fmt.Sprint(m["region"])}
			switch c.Kind {
			case runtime.RowInsert, runtime.RowUpdateAfter:
				if prev, ok := rows[user]; ok && have.orders <= prev.orders {
					return fmt.Errorf("user %s went back from %+v to %+v (partition %d, log offset %d)", user, prev, have, c.Bucket, c.LogOffset)
				}
				rows[user] = have
			case runtime.RowDelete:
				return fmt.Errorf("user %s deleted (partition %d, log offset %d)", user, c.Bucket, c.LogOffset)
			}
			return nil
		})
	if err != nil {
		return err.Error()
	}
	if len(rows) != len(ch.users) {
		return fmt.Sprintf("%d users in %d records, want %d", len(rows), records, len(ch.users))
	}
	for user, w := range ch.users {
		if rows[user] != *w {
			return fmt.Sprintf("user %s: replayed %+v, want %+v", user, rows[user], *w)
		}
	}
	ch.t.Logf("A's changelog: %d records, replayed equal to the exact table", records)
	return ""
}
