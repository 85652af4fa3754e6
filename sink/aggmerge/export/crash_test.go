package export

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

var (
	seedFlag  = flag.Int64("seed", 0, "seed of the kill schedule (0: from the clock)")
	killsFlag = flag.Int("kills", 20, "SIGKILLs of the exporting process before it may finish")
)

const (
	childEnv   = "EBBFLOW_EXPORT_CHILD" // the child's data directory
	crashCount = 40_000                 // sequence records
	crashKeys  = 64                     // a multiple of the sequence's 8 splits: each key's records in seq order
)

// TestMain lets the test binary double as the process that the crash test
// kills: it writes the table with the exactly-once writer and exports it.
func TestMain(m *testing.M) {
	crashtest.Main(m, childEnv, func(dir string) error {
		return runChild(dir, strings.Split(os.Getenv(childEnv+"_BROKERS"), ","), os.Getenv(childEnv+"_TOPIC"), Mode(os.Getenv(childEnv+"_MODE")))
	})
}

func crashSchema() aggmerge.Schema {
	return aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "k", Type: agg.Int64}},
		Values: []aggmerge.Column{
			{Name: "total", Type: agg.Int64, Func: "sum"},
			{Name: "n", Type: agg.Int64, Func: "count"},
			{Name: "top", Type: agg.Int64, Func: "max"},
			{Name: "last", Type: agg.Int64, Func: "last_value"},
		},
		Buckets: testBuckets,
	}
}

func mapEvent(e operators.Event, r *writer.Row) error {
	r.Kind = runtime.RowInsert
	r.Key = append(r.Key[:0], agg.IntValue(int64(e.Seq%crashKeys)))
	r.Vals = append(r.Vals[:0], agg.IntValue(e.Value), agg.IntValue(1), agg.IntValue(e.Value), agg.IntValue(int64(e.Seq)))
	return nil
}

// runChild runs, in one process as the runner would, a job writing the
// table through the exactly-once writer and the table's exporter. When the
// job's bounded input is done it waits for the export to catch up.
func runChild(dir string, brokers []string, topic string, mode Mode) error {
	tbl, err := aggmerge.Open(filepath.Join(dir, "table"), crashSchema(), aggmerge.Options{})
	if err != nil {
		return err
	}
	defer tbl.Close()
	x, err := New(Config{Table: tbl, Name: topic, Topic: topic, Kafka: kafka.Connection{Brokers: brokers}, Mode: mode,
		CheckpointInterval: 200 * time.Millisecond, MaxRecordsPerTxn: 500})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	defer func() { cancel(); <-done }()

	j := runtime.NewJob(runtime.Options{Name: "crash", DataDir: filepath.Join(dir, "job"),
		Checkpoint: runtime.CheckpointOptions{Interval: 200 * time.Millisecond}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: crashCount, Rate: 8_000}))
	if err := writer.To(src, "table", writer.Config{Table: tbl, BatchSize: 100, FlushInterval: 20 * time.Millisecond}, mapEvent); err != nil {
		return err
	}
	if err := j.Run(ctx); err != nil {
		return err
	}
	for !slices.Equal(x.Exported(), tbl.LogEnds()) {
		select {
		case err := <-done:
			return fmt.Errorf("exporter stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// TestCrashExporterSIGKILL kills the process that writes and exports the
// table at random moments, then lets it finish, and checks the topic:
// every change exactly once per partition in log order (by the offset
// header), read back equal to the table; in committed mode, no record from
// a rolled-back range, per key exactly the exact sequence of states, and
// versions that grow by one across the kills, each a checkpoint cut of the
// input read up to its end offsets, the last at the changelog's end.
func TestCrashExporterSIGKILL(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, mode := range []Mode{Committed, Uncommitted} {
		t.Run(string(mode), func(t *testing.T) {
			seed := crashtest.Seed(t, *seedFlag)
			rng := rand.New(rand.NewSource(seed))
			dir := t.TempDir()
			topic := kafkatest.NewTopic(t, brokers, testBuckets)
			env := []string{childEnv + "=" + dir, childEnv + "_BROKERS=" + strings.Join(brokers, ","),
				childEnv + "_TOPIC=" + topic, childEnv + "_MODE=" + string(mode)}
			finishedEarly := 0
			for k := 0; k < *killsFlag; k++ {
				killed, err := crashtest.Start(t, env...).KillAfter(time.Duration(50+rng.Intn(400)) * time.Millisecond)
				if err != nil {
					t.Fatalf("seed %d: child failed before kill %d: %v", seed, k, err)
				}
				if !killed {
					finishedEarly++
				}
			}
			if finishedEarly > *killsFlag/2 {
				t.Fatalf("seed %d: the child finished before %d of %d kills", seed, finishedEarly, *killsFlag)
			}
			if err := crashtest.Start(t, env...).Wait(3 * time.Minute); err != nil {
				t.Fatalf("seed %d: final run: %v", seed, err)
			}
			tbl, err := aggmerge.Open(filepath.Join(dir, "table"), crashSchema(), aggmerge.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer tbl.Close()
			checkCrashTopic(t, seed, brokers, topic, tbl, mode)
		})
	}
}

func checkCrashTopic(t *testing.T, seed int64, brokers []string, topic string, tbl *aggmerge.Table, mode Mode) {
	t.Helper()
	recs := kafkatest.ConsumeStable(t, brokers, topic) // the child's last commit
	got := exportedOffsets(t, recs, UpsertJSON)
	rbs := rollbacks(t, tbl)
	t.Logf("seed %d: %d records, %d rollbacks in the log", seed, len(recs), len(rbs))
	if len(rbs) == 0 {
		t.Fatalf("seed %d: no rollback in the log: the kills did not test undo", seed)
	}
	if mode == Uncommitted {
		sameOffsets(t, got, changeOffsets(t, tbl))
	} else {
		for _, rb := range rbs {
			for _, off := range got[int32(rb.bucket)] {
				if rb.m.From <= off && off < rb.m.To {
					t.Fatalf("seed %d: bucket %d: log offset %d exported, rolled back by [%d, %d) at %d",
						seed, rb.bucket, off, rb.m.From, rb.m.To, rb.off)
				}
			}
		}
		// Changes in log order, none twice; per key, states only ever
		// further along its events (the ranges folded differ from those of
		// an exporter that never stopped, so the records do).
		foldedOffsets(t, got, changeOffsets(t, tbl))
		checkStates(t, seed, recs)
		// The versions, published in the transactions of the changelog:
		// numbers growing by one across the kills, each a checkpoint cut
		// of the input, the last one at the changelog's end.
		vs, err := ReadVersions(context.Background(), kafka.Connection{Brokers: brokers}, topic+".versions")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: %d versions", seed, len(vs))
		checkVersions(t, vs, recs, testBuckets)
		for _, v := range vs {
			checkCut(t, fmt.Sprintf("seed %d: version %d", seed, v.Version), replay(recs, v.EndOffsets), []string{"total", "n", "top", "last"})
		}
	}
	want := tableJSON(t, tbl)
	if len(want) != crashKeys {
		t.Fatalf("seed %d: table has %d rows, want %d", seed, len(want), crashKeys)
	}
	for k, row := range want {
		if exp := expectedRow(keyOf(t, k), crashCount/crashKeys); row != exp {
			t.Fatalf("seed %d: table row %s, want %s", seed, row, exp)
		}
	}
	sameMaps(t, topicJSON(t, brokers, topic, UpsertJSON), want)
}

type rollback struct {
	bucket int
	off    uint64
	m      aggmerge.Marker
}

// rollbacks lists the rollback markers of the table's logs.
func rollbacks(t *testing.T, tbl *aggmerge.Table) []rollback {
	t.Helper()
	var out []rollback
	for b := range tbl.Schema().Buckets {
		err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
			if e.Op == aggmerge.MarkerEntry && e.Marker.Kind == aggmerge.MarkerRollback {
				out = append(out, rollback{bucket: b, off: e.Offset, m: e.Marker})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkStates: per key, the records carry states after more and more of
// its events (the writer combines several events of a key into one write),
// each exactly the state after its first n events: an exported value later
// undone would show as n going down when the undo is exported.
func checkStates(t *testing.T, seed int64, recs []*kgo.Record) {
	t.Helper()
	last := map[int64]int{}
	for _, r := range recs {
		k := keyOf(t, string(r.Key))
		var n int
		if i := strings.Index(string(r.Value), `"n":`); i >= 0 {
			_, _ = fmt.Sscanf(string(r.Value[i+4:]), "%d", &n)
		}
		if n <= last[k] || string(r.Value) != expectedRow(k, n) {
			t.Fatalf("seed %d: record %d of partition %d (log offset %s): key %d after state n=%d is %s, want n>%d and %s",
				seed, r.Offset, r.Partition, header(r, HeaderOffset), k, last[k], r.Value, last[k], expectedRow(k, n))
		}
		last[k] = n
	}
}

func keyOf(t *testing.T, keyJSON string) int64 {
	var k int64
	if _, err := fmt.Sscanf(keyJSON, `{"k":%d}`, &k); err != nil {
		t.Fatalf("key %s: %v", keyJSON, err)
	}
	return k
}

// expectedRow is key k's row after its first j events (seq k, k+keys, …).
func expectedRow(k int64, j int) string {
	var total, top, last int64
	for i := range j {
		seq := uint64(k) + uint64(i)*crashKeys
		v := operators.ValueOf(seq)
		total += v
		top = max(top, v)
		last = int64(seq)
	}
	return fmt.Sprintf(`{"k":%d,"total":%d,"n":%d,"top":%d,"last":%d}`, k, total, j, top, last)
}
