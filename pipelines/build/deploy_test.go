package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// TestDeploymentID: the id is made once, 0644, and every later or
// concurrent call returns it.
func TestDeploymentID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := DeploymentID(dir)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || len(id) != 16 {
			t.Fatalf("ids %v", ids)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "deployment.id"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("deployment.id: %v, %v", fi, err)
	}
	if again, err := DeploymentID(dir); err != nil || again != ids[0] {
		t.Fatalf("again: %q, %v; want %q", again, err, ids[0])
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("data dir holds %v, want only deployment.id", entries)
	}
	other, err := DeploymentID(t.TempDir())
	if err != nil || other == ids[0] {
		t.Fatalf("another data dir: %q, %v", other, err)
	}
}

// deployJob (job %s) writes the table %s from a datagen and publishes its
// changelog on brokers %s, topic %s.
const deployJob = `
job: {name: %s}
source:
  datagen: {rate: 500, fields: {k: {uniform: {min: 1, max: 20}}, v: {sequence: {}}}}
sink:
  table: {name: %s, primary_key: [k], buckets: 2, columns: {v: {agg: sum}}, changelog: {brokers: [%s], topic: %s}}
checkpoint: {interval: 50ms}
`

// deployment is one runner's jobs and exporters, in its own data dir.
type deployment struct {
	env      *Env
	cancel   context.CancelFunc
	job      chan error
	exported chan error
}

func startDeployment(t *testing.T, dir, job, table string, brokers []string, topic string) *deployment {
	t.Helper()
	p := load(t, fmt.Sprintf(deployJob, job, table, strings.Join(brokers, ","), topic))
	e := NewEnv(Options{DataDir: dir, Logger: testLogger()})
	if err := e.OpenTables([]*pipelines.Pipeline{p}); err != nil {
		t.Fatal(err)
	}
	j, err := e.Build(p, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &deployment{env: e, cancel: cancel, job: make(chan error, 1), exported: make(chan error, 1)}
	go func() { d.exported <- e.RunExporters(ctx) }()
	go func() { d.job <- j.Run(ctx) }()
	return d
}

// stop ends the deployment and returns its exporters' error.
func (d *deployment) stop(t *testing.T) error {
	t.Helper()
	d.cancel()
	<-d.job
	err := <-d.exported
	if cerr := d.env.Close(); cerr != nil {
		t.Error(cerr)
	}
	return err
}

// awaitGrowth waits until the end offsets of topic exceed from, while d's
// exporters keep running.
func awaitGrowth(t *testing.T, adm *kadm.Client, d *deployment, topic string, from int64, what string) int64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if n := kafkatest.EndOffsets(t, adm, topic); n > from {
			return n
		}
		select {
		case err := <-d.exported:
			t.Fatalf("%s: the exporter ended: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: topic %q did not grow past %d", what, topic, from)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTwoDeploymentsSameTableName: two runners (data dirs) whose tables
// have the same name export to their own topics on one cluster; neither
// fences the other (their transactional ids derive from their deployment
// ids), and both keep exporting.
func TestTwoDeploymentsSameTableName(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	adm := kafkatest.Admin(t, brokers)
	ta, tb := kafkatest.TopicName(t, brokers), kafkatest.TopicName(t, brokers)
	a := startDeployment(t, t.TempDir(), "team-a", "orders", brokers, ta)
	awaitGrowth(t, adm, a, ta, 0, "a alone")
	b := startDeployment(t, t.TempDir(), "team-b", "orders", brokers, tb)
	awaitGrowth(t, adm, b, tb, 0, "b")
	// a was not fenced: it goes on exporting after b started.
	awaitGrowth(t, adm, a, ta, kafkatest.EndOffsets(t, adm, ta), "a after b started")
	if err := b.stop(t); err != nil {
		t.Fatalf("b: %v", err)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}
}

// TestChangelogTopicOfAnotherTable: a runner whose table has the same name
// as another runner's, pointed at that runner's changelog topic, fails at
// its start with an error naming both tables and transactional ids, and the
// runner already exporting there goes on.
func TestChangelogTopicOfAnotherTable(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	adm := kafkatest.Admin(t, brokers)
	topic := kafkatest.TopicName(t, brokers)
	a := startDeployment(t, t.TempDir(), "team-a", "orders", brokers, topic)
	awaitGrowth(t, adm, a, topic, 0, "a alone")
	b := startDeployment(t, t.TempDir(), "team-b", "orders", brokers, topic)
	var berr error
	select {
	case berr = <-b.exported:
	case <-time.After(60 * time.Second):
		t.Fatal("the newcomer did not fail")
	}
	b.exported <- nil // for stop
	if !errors.Is(berr, export.ErrMismatch) || !strings.Contains(berr.Error(), "team-a-orders") ||
		!strings.Contains(berr.Error(), "team-b-orders") || !strings.Contains(berr.Error(), `table "orders"`) {
		t.Fatalf("newcomer: %v, want an ErrMismatch naming both exporters", berr)
	}
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	awaitGrowth(t, adm, a, topic, kafkatest.EndOffsets(t, adm, topic), "a after the newcomer failed")
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}
}

// TestUpgradeFromTableTransactionalID: a data dir whose exporter used the
// former id "ebbflow-export-<table>" (its hold on the log, its records in
// the topic, and a transaction it left open) starts with the derived id:
// the exporter initialises the former id once, which aborts the open
// transaction at once (else read_committed readers would see nothing new
// until its 10-minute timeout), releases its hold, and resumes right
// after the last committed record, without a duplicate.
func TestUpgradeFromTableTransactionalID(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.TopicName(t, brokers)
	dir := t.TempDir()
	// A table name of its own: the former id is the same for every table
	// of that name on the cluster.
	table := fmt.Sprintf("orders_%d", time.Now().UnixNano())
	withChangelog := fmt.Sprintf(deployJob, "shop", table, strings.Join(brokers, ","), topic)
	without := strings.Replace(withChangelog, fmt.Sprintf(", changelog: {brokers: [%s], topic: %s}", strings.Join(brokers, ","), topic), "", 1)
	if without == withChangelog {
		t.Fatal("no changelog to remove")
	}

	// The former version: a job, and the exporter with the table's id.
	p := load(t, without)
	e := NewEnv(Options{DataDir: dir, Logger: testLogger()})
	if err := e.OpenTables([]*pipelines.Pipeline{p}); err != nil {
		t.Fatal(err)
	}
	j, err := e.Build(p, runtime.RestoreLatest)
	if err != nil {
		t.Fatal(err)
	}
	// Stopped with a final checkpoint: a committed exporter then has every
	// entry to catch up to (cut short instead, the entries past the last
	// checkpoint would wait for the job's next start).
	stop := time.AfterFunc(300*time.Millisecond, j.Stop)
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop.Stop()
	tab, _ := e.Table(table)
	legacy := export.DefaultTransactionalID(table)
	x, err := export.New(export.Config{Table: tab, Name: table, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	for deadline := time.Now().Add(60 * time.Second); !caughtUp(x.Exported(), tab.LogEnds()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the former exporter did not catch up")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// It died inside a transaction.
	zombie := kafkatest.Client(t, brokers, kgo.TransactionalID(legacy), kgo.TransactionTimeout(10*time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	res := zombie.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: 0, Key: []byte(`{"k":0}`), Value: []byte("never committed")})
	open, err := res.First()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	d := startDeployment(t, dir, "shop", table, brokers, topic)
	adm := kafkatest.Admin(t, brokers)
	dtab, _ := d.env.Table(table)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		stable, err := adm.ListCommittedOffsets(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		lso, _ := stable.Lookup(topic, 0)
		holders, err := dtab.Holders()
		if err != nil {
			t.Fatal(err)
		}
		if lso.Offset > open.Offset && !slices.Contains(holders, legacy) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition 0's last stable offset %d (the open transaction's record: %d), holders %v: the former id was not closed",
				lso.Offset, open.Offset, holders)
		}
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	last := map[int32]uint64{}
	for _, r := range kafkatest.ConsumeStable(t, brokers, topic) {
		var off uint64
		for _, h := range r.Headers {
			if h.Key == export.HeaderOffset {
				off, _ = strconv.ParseUint(string(h.Value), 10, 64)
			}
		}
		if prev, ok := last[r.Partition]; ok && off <= prev {
			t.Fatalf("partition %d: log offset %d after %d (a duplicate)", r.Partition, off, prev)
		}
		last[r.Partition] = off
	}
}

func caughtUp(done, ends []uint64) bool {
	for b, end := range ends {
		if done[b] < end {
			return false
		}
	}
	return true
}

// TestTransactionalIDs: the exporter's id is ebbflow-<deployment>-<job>-
// <table>, or changelog.transactional_id when the file sets it.
func TestTransactionalIDs(t *testing.T) {
	for _, explicit := range []string{"", "team-a.orders"} {
		dir := t.TempDir()
		src := fmt.Sprintf(deployJob, "shop", "orders", "127.0.0.1:1", "out")
		if explicit != "" {
			src = strings.Replace(src, "topic: out}", "topic: out, transactional_id: "+explicit+"}", 1)
		}
		p := load(t, src)
		e := NewEnv(Options{DataDir: dir, Logger: testLogger()})
		if err := e.OpenTables([]*pipelines.Pipeline{p}); err != nil {
			t.Fatal(err)
		}
		want := explicit
		if want == "" {
			dep, err := DeploymentID(dir)
			if err != nil {
				t.Fatal(err)
			}
			want = "ebbflow-" + dep + "-shop-orders"
		}
		if got := e.exporters[0].x.Holder(); got != want {
			t.Errorf("transactional id %q, want %q", got, want)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
