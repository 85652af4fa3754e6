package repartition

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// The shared table of the two-job tests: the owner job "scale" writes
// total and top (its orders), the independent job "other" writes spent
// (its payments), each from its own input through the one repartition
// topic.
const otherJob = "other"

// shared is the exact shared table: user → (total, top, spent).
type shared map[string][3]int64

func sharedSchema() aggmerge.Schema {
	s := scaleSchema()
	s.Values = append(s.Values, aggmerge.Column{Name: "spent", Type: agg.Type{Kind: agg.KindInt64}, Func: "sum"})
	return s
}

// openSharedTable opens the shared table in dir, and the router of its
// two jobs (refused rows counted in m, which may be nil).
func openSharedTable(t testing.TB, dir string, m *Metrics) (*aggmerge.Table, *Router) {
	table, err := aggmerge.Open(filepath.Join(dir, "tables", "totals"), sharedSchema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = table.Close() })
	owner, err := NewCodec(table, "scale", []string{"total", "top"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(m, JobWriter{Codec: owner, Sink: "totals", Config: writer.Config{Table: table}},
		JobWriter{Codec: otherCodec(t, table), Sink: "totals", Config: writer.Config{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	return table, r
}

func otherCodec(t testing.TB, table *aggmerge.Table) *Codec {
	c, err := NewCodec(table, otherJob, []string{"spent"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// paymentRow is the other job's stage-1 mapper: "<user>,<amount>" → key
// user, spent.
func paymentRow(r *kgo.Record, row *writer.Row) (bool, error) {
	user, amount, ok := strings.Cut(string(r.Value), ",")
	n, err := strconv.ParseInt(amount, 10, 64)
	if !ok || err != nil {
		return false, fmt.Errorf("not a payment: %q", r.Value)
	}
	row.Kind = runtime.RowInsert
	row.Key = append(row.Key[:0], agg.StringValue(user))
	row.Vals = append(row.Vals[:0], agg.IntValue(n))
	return true, nil
}

// otherStage1 is stage 1 of the independent job, instance i: its own
// group and transactional id, its codec's headers.
type otherStage1 struct {
	stop func()
	done chan error
}

func startOther(t *testing.T, brokers []string, input, topic string, i int, table *aggmerge.Table) *otherStage1 {
	c := otherCodec(t, table)
	o := &otherStage1{done: make(chan error, 1)}
	o.stop = runWriter(t, WriterConfig{Kafka: kafka.Connection{Brokers: brokers}, Group: topic + "-" + otherJob, Input: []string{input},
		Topic: topic, Buckets: scaleBuckets, TransactionalID: fmt.Sprintf("%s-%s-%d", topic, otherJob, i), Headers: c.Headers()},
		o.done, c.Sender(paymentRow))
	return o
}

func (o *otherStage1) end(t *testing.T) {
	o.stop()
	if err := <-o.done; err != nil {
		t.Errorf("stage 1 of job %s: %v", otherJob, err)
	}
}

// twoInputs makes the two jobs' input topics; produce writes n more
// seeded orders (to the owner job's input) and n payments (to the other's),
// adding them to want.
func twoInputs(t *testing.T) (brokers []string, orders, payments, topic string, want shared, produce func(n int)) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-seed %d repeats the input)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	brokers = kafkatest.Brokers(t)
	orders, payments = kafkatest.NewTopic(t, brokers, scaleInput), kafkatest.NewTopic(t, brokers, scaleInput)
	topic = kafkatest.TopicName(t, brokers)
	want = shared{}
	produce = func(n int) {
		var recs []*kgo.Record
		for range n {
			user, amount := fmt.Sprintf("u%d", rng.IntN(200)), rng.Int64N(1000)
			w := want[user]
			w[0] += amount
			w[1] = max(w[1], amount)
			want[user] = w
			recs = append(recs, &kgo.Record{Topic: orders, Partition: int32(rng.IntN(scaleInput)), Value: fmt.Appendf(nil, "%s,%d", user, amount)})
			user, amount = fmt.Sprintf("u%d", 100+rng.IntN(200)), rng.Int64N(1000) // users of both jobs and of one
			w = want[user]
			w[2] += amount
			want[user] = w
			recs = append(recs, &kgo.Record{Topic: payments, Partition: int32(rng.IntN(scaleInput)), Value: fmt.Appendf(nil, "%s,%d", user, amount)})
		}
		kafkatest.Produce(t, brokers, recs...)
	}
	return brokers, orders, payments, topic, want, produce
}

// scanShared reads table into got, failing on a key already there (from
// another instance's table).
func scanShared(t *testing.T, table *aggmerge.Table, got shared) {
	t.Helper()
	err := table.Scan(func(r aggmerge.Row) error {
		user := r.Key[0].Str()
		if _, dup := got[user]; dup {
			return fmt.Errorf("user %s in two tables", user)
		}
		got[user] = [3]int64{r.Values[0].Int(), r.Values[1].Int(), r.Values[2].Int()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitShared waits until the union of the tables equals want, failing
// when a stage of ds ends first.
func waitShared(t *testing.T, ds []*dynamic, want shared) {
	t.Helper()
	deadline := time.Now().Add(kafkatest.Timeout)
	for {
		got := shared{}
		for _, d := range ds {
			scanShared(t, d.table, got)
		}
		d := diff(got, want)
		if d == "" {
			return
		}
		ended(t, ds)
		if time.Now().After(deadline) {
			t.Fatalf("the tables never reached the exact aggregates of both jobs: %s", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestJobsShareTable runs two independent jobs writing disjoint columns of
// one table through the hop: the owner job in instances under dynamic
// ownership, whose stage 2 applies both jobs' rows (each job's as its own
// writer), and the other job's stage 1 alone, with its own group and
// transactional id. Input of both keeps arriving while an owner instance
// is killed (its buckets handed over to the other from the owner log), the
// other job's stage 1 is restarted, and a new owner instance joins. The
// tables' union equals the exact aggregates of both inputs each time, and
// at the end so does the owner log (ReadAll), whose chains check.
func TestJobsShareTable(t *testing.T) {
	brokers, orders, payments, topic, want, produce := twoInputs(t)
	produce(300)
	startA := func(i int) *dynamic {
		dir := t.TempDir()
		table, router := openSharedTable(t, dir, nil)
		return startDynamicOn(t, brokers, orders, topic, i, dir, table, router)
	}
	ds := []*dynamic{startA(0), startA(1)}
	other := startOther(t, brokers, payments, topic, 0, ds[0].table)
	produce(200)
	waitOwned(t, ds)
	waitShared(t, ds, want)

	// A handover in the middle: instance 1 is killed (no final
	// checkpoint), the other job's stage 1 restarted.
	ds[1].crash()
	ds = ds[:1]
	other.end(t)
	produce(100)
	other = startOther(t, brokers, payments, topic, 0, ds[0].table)
	for range 3 {
		produce(100)
		time.Sleep(20 * time.Millisecond)
	}
	waitOwned(t, ds)
	waitShared(t, ds, want)

	ds = append(ds, startA(2))
	produce(200)
	waitOwned(t, ds)
	waitShared(t, ds, want)

	other.end(t)
	for _, d := range ds {
		d.stop(t)
	}
	whole, _ := openSharedTable(t, t.TempDir(), nil)
	rows, err := ReadAll(t.Context(), kafka.Connection{Brokers: brokers}, topic, whole)
	if err != nil {
		t.Fatal(err)
	}
	got := shared{}
	scanShared(t, whole, got)
	if d := diff(got, want); d != "" {
		t.Fatalf("the owner log after the stop: %s", d)
	}
	t.Logf("the owner log holds %d rows of %d users", rows, len(want))
	if err := CheckOwners(t.Context(), kafka.Connection{Brokers: brokers}, topic, scaleBuckets, len(sharedSchema().Values)); err != nil {
		t.Fatal(err)
	}
	logged := shared{}
	for user, v := range changelogRows(t, brokers, topic, "total", "top", "spent") {
		logged[user] = [3]int64{v[0], v[1], v[2]}
	}
	if d := diff(logged, want); d != "" {
		t.Fatalf("the changelog after the stop: %s", d)
	}
}

// TestJobsShareTableBite: stage 2 refuses a row whose job does not own its
// columns (the other job claiming the owner's total), and a row of a job
// that writes nothing here; with on_error skip both are counted and the
// table holds the exact aggregates of the two jobs' inputs. With on_error
// fail the same row ends stage 2 with ErrColumns. A third job whose
// writer would register the owner's column is refused by the table's
// registry.
func TestJobsShareTableBite(t *testing.T) {
	brokers, orders, payments, topic, want, produce := twoInputs(t)
	produce(200)
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	table, router := openSharedTable(t, dir, m)
	forged := func(job string, columns []string, vals ...agg.Value) *kgo.Record {
		c, err := NewCodec(table, job, columns)
		if err != nil {
			t.Fatal(err)
		}
		row := writer.Row{Kind: runtime.RowInsert, Key: []agg.Value{agg.StringValue("u1")}, Vals: vals}
		key, err := c.AppendKey(nil, &row)
		if err != nil {
			t.Fatal(err)
		}
		val, err := c.AppendValue(nil, &row)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: topic, Partition: int32(base.BucketOf(key, scaleBuckets)), Key: key, Value: val, Headers: c.Headers()}
	}
	bites := []*kgo.Record{
		forged(otherJob, []string{"total"}, agg.IntValue(1e9)),
		forged("ghost", []string{"spent"}, agg.IntValue(1e9)),
	}
	other := startOther(t, brokers, payments, topic, 0, table)
	done1 := make(chan error, 1)
	stop1 := runStage1(t, brokers, orders, topic, 0, done1, router.Owner().Sender(orderRow))
	kafkatest.Produce(t, brokers, bites...)
	produce(200)

	stage2 := func(onError kafka.ErrorPolicy) (*runtime.Job, chan error) {
		src, err := NewSource(SourceConfig{Kafka: kafka.Connection{Brokers: brokers}, Topic: topic,
			Owned: Owned(scaleBuckets, 0, 1), OnError: onError}, router)
		if err != nil {
			t.Fatal(err)
		}
		job, err := newStage2(dir, src, router)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- job.Run(t.Context()) }()
		return job, done
	}
	job, done2 := stage2(kafka.Skip)
	deadline := time.Now().Add(kafkatest.Timeout)
	for {
		got := shared{}
		scanShared(t, table, got)
		d := diff(got, want)
		if d == "" {
			break
		}
		select {
		case err := <-done2:
			t.Fatalf("stage 2 ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the table never reached the exact aggregates of both jobs: %s", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var refused dto.Metric
	if err := m.refused.Write(&refused); err != nil {
		t.Fatal(err)
	}
	if n := refused.GetCounter().GetValue(); n != float64(len(bites)) {
		t.Errorf("ebbflow_repartition_records_refused_total = %v, want %d", n, len(bites))
	}
	stop1()
	if err := <-done1; err != nil {
		t.Error(err)
	}
	other.end(t)
	job.Stop()
	if err := <-done2; err != nil {
		t.Fatal(err)
	}

	// on_error fail: the forged row, read again from the start by a new
	// stage 2 on a new table, ends it.
	dir = t.TempDir()
	table, router = openSharedTable(t, dir, nil)
	_, done2 = stage2(kafka.Fail)
	select {
	case err := <-done2:
		if !errors.Is(err, ErrColumns) || !strings.Contains(err.Error(), `column "total", which is job "scale"'s`) {
			t.Fatalf("stage 2 ended with %v, want ErrColumns naming the column's job", err)
		}
	case <-time.After(kafkatest.Timeout):
		t.Fatal("stage 2 applied the forged row")
	}

	// A third job's writer on the owner's column: the registry refuses it.
	thief, err := NewCodec(table, "thief", []string{"top"})
	if err != nil {
		t.Fatal(err)
	}
	router, err = NewRouter(nil, router.writers[0], router.writers[1], JobWriter{Codec: thief, Sink: "totals", Config: writer.Config{Table: table}})
	if err != nil {
		t.Fatal(err)
	}
	_, done2 = stage2(kafka.Fail)
	if err := <-done2; !errors.Is(err, aggmerge.ErrColumnConflict) {
		t.Fatalf("stage 2 with a writer of job thief on top ended with %v, want ErrColumnConflict", err)
	}
	if ws := table.Writers(); slices.ContainsFunc(ws, func(r aggmerge.Registration) bool { return r.Job == "thief" }) {
		t.Errorf("job thief registered: %v", ws)
	}
}

// TestPublisherCutsPerWriter: the image of a row is each writer's columns
// as of that writer's commit marker, not as of one offset: the owner
// job's marker of checkpoint N ends at 3, the other job's at 5, so the
// owner's change at 3 (of checkpoint N+1) is not in the image while the
// other job's change at 4 is; a row first changed past a writer's marker
// keeps that writer's columns from its before-image; a row inserted past
// every marker has no image.
func TestPublisherCutsPerWriter(t *testing.T) {
	table, router := openSharedTable(t, t.TempDir(), nil)
	pb, err := NewPublisher(&Handover{}, table, kafka.NewPositions(), router.Groups(), nil)
	if err != nil {
		t.Fatal(err)
	}
	row := func(total, top, spent int64) []agg.Value {
		return []agg.Value{agg.IntValue(total), agg.IntValue(top), agg.IntValue(spent)}
	}
	owner, other := router.writers[0].Group(), router.writers[1].Group()
	pb.pending = []change{
		{offset: 0, group: owner, key: []byte("a"), after: row(5, 5, 0)},
		{offset: 1, group: other, key: []byte("b"), before: row(1, 1, 1), after: row(1, 1, 2)},
		{offset: 2, group: other, key: []byte("a"), before: row(5, 5, 0), after: row(5, 5, 3)},
		{offset: 3, group: owner, key: []byte("a"), before: row(5, 5, 3), after: row(9, 9, 3)},
		{offset: 4, group: other, key: []byte("a"), before: row(9, 9, 3), after: row(9, 9, 7)},
		{offset: 5, group: owner, key: []byte("b"), before: row(1, 1, 2), after: row(4, 4, 2)},
		{offset: 6, group: other, key: []byte("c"), before: nil, after: row(0, 0, 1)},
	}
	cuts, hi := map[string]uint64{owner: 3, other: 5}, uint64(5)
	for _, tc := range []struct {
		key     string
		changes []int
		want    []agg.Value
	}{
		{"a", []int{0, 2, 3, 4}, row(5, 5, 7)},
		{"b", []int{1, 5}, row(1, 1, 2)},
		{"c", []int{6}, nil},
	} {
		got := pb.image(tc.changes, cuts, hi)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("image of %s: %v, want %v", tc.key, got, tc.want)
		}
	}
}
