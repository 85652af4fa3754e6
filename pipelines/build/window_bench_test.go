package build

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/cputime"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

var (
	benchWindowedRecords    = flag.Int("windowed.records", 1_200_000, "records BenchmarkWindowedJob preloads (100k users, 10 per ms of event time)")
	benchWindowedCheckpoint = flag.Duration("windowed.checkpoint", 10*time.Second, "the checkpoint interval of BenchmarkWindowedJob's jobs (default: a job file's)")
)

// benchWindowedJob is the job of BenchmarkWindowedJob: a bounded Kafka
// source with event time, the count and sum of the amounts per user, with
// the window %[4]s (none when empty).
const benchWindowedJob = `
job: {name: %[3]s, parallelism: 2}
source:
  kafka:
    brokers: [%[1]s]
    topics: [%[2]s]
    bounded: true
    schema: {user: string, amount: int64, ts: timestamp}
    event_time: {field: ts, max_out_of_orderness: 1s}
sink:
  table:
    name: per_user
    primary_key: [user]
    buckets: 4
    columns: {n: {agg: count}, total: {agg: sum, from: amount}}%[4]s
checkpoint: {interval: %[5]s}
`

// BenchmarkWindowedJob runs a bounded Kafka → table job over one preloaded
// input twice per iteration, in the same process one after the other:
// without a window (a row per user) and with a 1-minute tumbling window
// (window_start and window_end in the key), emit: updates or final (the
// sub-benchmarks), both checkpointing every -windowed.checkpoint (a job
// file's default, 10s: a final window's open partials are keyed state in
// pebble, written at every checkpoint, so a shorter interval costs it more
// than the plain job). The input: -windowed.records records, user i mod 100k,
// event time 10 records per millisecond in order (so each user has 6
// records in each minute, 2 windows per 1.2M records). Each run is
// checked: the counts of its table add up to the input. Reports the
// records per second and per CPU-second of the process (every goroutine,
// the embedded broker's too: a loaded machine disturbs it far less than
// the elapsed time) of each, and the windowed job's throughput as % of the
// plain one's, by CPU (%-of-plain) and by elapsed time (%-of-plain-wall);
// the target: ≥ 70 %.
//
//	go test ./pipelines/build -run '^$' -bench WindowedJob -benchtime 1x -count 3
func BenchmarkWindowedJob(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	topic := kafkatest.NewTopic(b, brokers, 4)
	n := *benchWindowedRecords
	kafkatest.PreloadValues(b, brokers, topic, n, 4, func(i int) []byte {
		return fmt.Appendf(nil, `{"user":"u%05d","amount":%d,"ts":%d}`, i%100_000, i%997, 1_700_000_040_000+int64(i/10))
	})
	for _, emit := range []string{"updates", "final"} {
		b.Run(emit, func(b *testing.B) {
			var plain, windowed [2]time.Duration // elapsed, CPU
			for i := range b.N {
				addTimes(&plain, runWindowedJob(b, brokers, topic, fmt.Sprintf("plain_%s_%d", emit, i), "", n))
				addTimes(&windowed, runWindowedJob(b, brokers, topic, fmt.Sprintf("windowed_%s_%d", emit, i),
					"\n    window: {tumble: 1m, on: ts, emit: "+emit+"}", n))
			}
			recs := float64(n * b.N)
			b.ReportMetric(recs/plain[0].Seconds(), "plain-rec/s")
			b.ReportMetric(recs/windowed[0].Seconds(), "windowed-rec/s")
			b.ReportMetric(recs/plain[1].Seconds(), "plain-rec/cpu-s")
			b.ReportMetric(recs/windowed[1].Seconds(), "windowed-rec/cpu-s")
			b.ReportMetric(100*plain[1].Seconds()/windowed[1].Seconds(), "%-of-plain")
			b.ReportMetric(100*plain[0].Seconds()/windowed[0].Seconds(), "%-of-plain-wall")
		})
	}
}

func addTimes(sum *[2]time.Duration, d [2]time.Duration) { sum[0], sum[1] = sum[0]+d[0], sum[1]+d[1] }

// runWindowedJob runs the job of BenchmarkWindowedJob with window (YAML,
// "" for none) in a new data directory until its bounded input ended, and
// returns how long it ran, from the build to the end, and the CPU time the
// process used meanwhile. The counts of the table must add up to n.
func runWindowedJob(b *testing.B, brokers []string, topic, name, window string, n int) [2]time.Duration {
	b.Helper()
	ps, err := pipelines.Load([]pipelines.File{{Name: "job.yaml",
		Data: fmt.Appendf(nil, benchWindowedJob, strings.Join(brokers, ","), topic, name, window, *benchWindowedCheckpoint)}}, pipelines.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e := NewEnv(Options{DataDir: b.TempDir(), Logger: testLogger()})
	defer e.Close()
	if err := e.OpenTables(ps); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start, cpu := time.Now(), cputime.Process()
	_, done := startJob(b, ctx, e, ps[0])
	if err := <-done; err != nil {
		b.Fatalf("%s: run: %v", name, err)
	}
	took := [2]time.Duration{time.Since(start), cputime.Process() - cpu}
	tab, _ := e.Table("per_user")
	var count int64
	if err := tab.Scan(func(r aggmerge.Row) error {
		count += r.Values[0].Int()
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if count != int64(n) {
		b.Fatalf("%s: the table counts %d records, want %d", name, count, n)
	}
	return took
}
