package build

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/cputime"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// scaleBenchRecords is the input of BenchmarkScaleHop: kafkatest.Preload's
// records (100k users).
const scaleBenchRecords = 1_000_000

// scaleBenchJob is the job of BenchmarkScaleHop: per user sum, count and
// max of the amount, parallelism 2, checkpoints every second; scale adds
// a job.scale block. Each run has its own name, so that a scaled run's
// group (<name>.scale) starts from the beginning of the input.
func scaleBenchJob(name string, brokers []string, topic, scale string) string {
	return fmt.Sprintf(`job: {name: %s, parallelism: 2%s}
source:
  kafka:
    brokers: [%s]
    topics: [%s]
    schema: {user: string, amount: int64}
key_by: [user]
sink:
  table:
    name: per_user
    primary_key: [user]
    buckets: 8
    columns:
      total: {agg: sum, from: amount}
      n:     {agg: count}
      top:   {agg: max, from: amount}
checkpoint: {interval: 1s}
`, name, scale, brokers[0], topic)
}

// BenchmarkScaleHop measures the cost of the repartition hop (issue #14):
// each op runs the same job on the same preloaded topic as one process
// (plain), as the one instance of a scaled job (scale: stage 1 maps the
// input to partial rows and commits them to the repartition topic once per
// second, stage 2 reads them back read_committed into the table), and as
// two instances of it in this process (scale2), back to back, so that every
// ratio comes from runs of one op. Rates run from the start to the end of
// the final checkpoints once the jobs' sources read all (stage 2's sources:
// every row crossed the hop); CPU is the process's per input record (the
// embedded broker's included). scale-%plain is the scaled rate as a share
// of the plain one (target ≥ 60 %); scale2-cpu-x is the CPU per record of
// two instances over that of one (on 2 cores the rate cannot double; the
// target is that N instances cost at most N times one). Run with
// -benchtime 1x -count N.
func BenchmarkScaleHop(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	topic := kafkatest.NewTopic(b, brokers, 4)
	kafkatest.Preload(b, brokers, topic, scaleBenchRecords, 4)
	run := 0
	name := func() string { run++; return fmt.Sprintf("scalebench%d", run) }
	scaled := func(instances int) []string {
		job, repartition := name(), kafkatest.TopicName(b, brokers)
		var srcs []string
		for i := range instances {
			srcs = append(srcs, scaleBenchJob(job, brokers, topic, fmt.Sprintf(", scale: {mode: kafka, instance: %d, instances: %d, repartition_topic: %s}", i, instances, repartition)))
		}
		return srcs
	}
	for range b.N {
		plainRate, plainCPU := runScaleBench(b, scaleBenchJob(name(), brokers, topic, ""))
		scaleRate, scaleCPU := runScaleBench(b, scaled(1)...)
		scale2Rate, scale2CPU := runScaleBench(b, scaled(2)...)
		b.ReportMetric(plainRate, "plain-records/s")
		b.ReportMetric(scaleRate, "scale-records/s")
		b.ReportMetric(scale2Rate, "scale2-records/s")
		b.ReportMetric(plainCPU, "plain-cpu-ns/rec")
		b.ReportMetric(scaleCPU, "scale-cpu-ns/rec")
		b.ReportMetric(scale2CPU, "scale2-cpu-ns/rec")
		b.ReportMetric(100*scaleRate/plainRate, "scale-%plain")
		b.ReportMetric(scale2CPU/scaleCPU, "scale2-cpu-x")
	}
}

// runScaleBench runs the jobs of srcs (one per instance, each in its own
// Env and data directory) once over the preloaded input, and returns the
// records per second and CPU nanoseconds per record of the whole, after
// checking that their tables together counted every record.
func runScaleBench(b *testing.B, srcs ...string) (rate, cpuPerRecord float64) {
	type instance struct {
		e    *Env
		j    *Job
		done <-chan error
	}
	var ins []instance
	start, cpu0 := time.Now(), cputime.Process()
	for _, src := range srcs {
		ps, err := pipelines.Load([]pipelines.File{{Name: "job.yaml", Data: []byte(src)}}, pipelines.Options{})
		if err != nil {
			b.Fatal(err)
		}
		e := NewEnv(Options{DataDir: b.TempDir(), Logger: testLogger()})
		if err := e.OpenTables(ps); err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		j, done := startJob(b, context.Background(), e, ps[0])
		ins = append(ins, instance{e, j, done})
	}
	for read := int64(0); read < scaleBenchRecords; time.Sleep(10 * time.Millisecond) {
		read = 0
		for _, in := range ins {
			for _, task := range in.j.Status().Tasks {
				if task.Source {
					read += task.RecordsIn
				}
			}
			select {
			case err := <-in.done:
				b.Fatalf("a job ended after the sources read %d records: %v", read, err)
			default:
			}
		}
	}
	for _, in := range ins {
		in.j.Stop()
	}
	for _, in := range ins {
		if err := <-in.done; err != nil {
			b.Fatal(err)
		}
	}
	elapsed, cpu := time.Since(start), cputime.Process()-cpu0
	var counted int64
	for _, in := range ins {
		tab, _ := in.e.Table("per_user")
		if err := tab.Scan(func(r aggmerge.Row) error { counted += r.Values[1].Int(); return nil }); err != nil {
			b.Fatal(err)
		}
	}
	if counted != scaleBenchRecords {
		b.Fatalf("the tables count %d records, want %d", counted, scaleBenchRecords)
	}
	return scaleBenchRecords / elapsed.Seconds(), float64(cpu.Nanoseconds()) / scaleBenchRecords
}
