package build

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// policyJob reads {k, a, b} and stores a % b per k: b = 0 fails the
// expression at run time.
const policyJob = `
job: {name: policy}
source:
  kafka:
    brokers: [%s]
    topics: [%s]
    on_error: %s
    %s
    schema: {k: string, a: int64, b: int64}
transforms:
  - map: {r: a %% b}
sink:
  table: {name: mods, primary_key: [k], buckets: 2, columns: {sum: {agg: sum, from: r}, n: {agg: count}}}
checkpoint: {interval: 50ms}
restart: {max_attempts: 0}
`

// TestEvalErrorPolicies sends records whose expression fails (b = 0) and
// checks each on_error policy: fail ends the job with the expression's
// error; skip drops them; dead_letter creates the missing dead-letter topic
// at start and writes their fields there, with the same headers as the
// source's dead letters (error, source topic, partition, offset), counted
// in a metric.
func TestEvalErrorPolicies(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, 1)
	var recs []*kgo.Record
	wantSum, wantN, bad := int64(0), int64(0), 0
	badOffsets := map[string]bool{}
	for i := range 200 {
		b := int64(i%7 + 1)
		if i%10 == 3 {
			b, bad = 0, bad+1
			badOffsets[fmt.Sprint(i)] = true
		} else {
			wantSum += int64(i) % b
			wantN++
		}
		recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, `{"k":"x","a":%d,"b":%d}`, i, b)})
	}
	kafkatest.Produce(t, brokers, recs...)
	dlq := kafkatest.TopicName(t, brokers)
	for _, policy := range []string{"fail", "skip", "dead_letter"} {
		t.Run(policy, func(t *testing.T) {
			extra := ""
			if policy == "dead_letter" {
				extra = "dead_letter_topic: " + dlq
			}
			p := load(t, fmt.Sprintf(policyJob, strings.Join(brokers, ","), topic, policy, extra))
			reg := prometheus.NewRegistry()
			e := openEnv(t, Options{DataDir: t.TempDir(), Registerer: reg}, p)
			defer e.Close()
			j, done := startJob(t, context.Background(), e, p)
			if policy == "fail" {
				select {
				case err := <-done:
					if !errors.Is(err, pipelines.ErrEval) {
						t.Fatalf("Run: %v, want an ErrEval", err)
					}
				case <-time.After(30 * time.Second):
					j.Stop()
					t.Fatal("the job did not fail")
				}
				return
			}
			tab, _ := e.Table("mods")
			deadline := time.Now().Add(30 * time.Second)
			var sum, n int64
			for time.Now().Before(deadline) {
				if r, ok, err := tab.Get([]agg.Value{agg.StringValue("x")}); err == nil && ok {
					sum, n = r.Values[0].Int(), r.Values[1].Int()
					if n == wantN {
						break
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			var skipped float64
			if policy == "skip" {
				skipped = dropped(t, reg, "ebbflow_operator_records_dropped_total") // before the job's metrics go with it
			}
			if policy == "dead_letter" {
				skipped = dropped(t, reg, "ebbflow_operator_records_dead_lettered_total")
			}
			j.Stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if sum != wantSum || n != wantN {
				t.Fatalf("sum %d n %d, want %d %d", sum, n, wantSum, wantN)
			}
			if skipped != float64(bad) {
				t.Fatalf("%v records counted as %s, want %d", skipped, policy, bad)
			}
			if policy == "dead_letter" {
				got := kafkatest.ConsumeAll(t, brokers, dlq)
				if len(got) != bad {
					t.Fatalf("%d dead letters, want %d", len(got), bad)
				}
				offsets := map[string]bool{}
				for _, r := range got {
					h := map[string]string{}
					for _, kv := range r.Headers {
						h[kv.Key] = string(kv.Value)
					}
					if !strings.HasSuffix(string(r.Value), `"b":0}`) || !strings.Contains(h[kafka.HeaderError], "divide by zero") ||
						h[kafka.HeaderTopic] != topic || h[kafka.HeaderPartition] != "0" {
						t.Fatalf("dead letter %s %v", r.Value, h)
					}
					offsets[h[kafka.HeaderOffset]] = true
				}
				if !maps.Equal(offsets, badOffsets) {
					t.Fatalf("dead letters of offsets %v, want %v", offsets, badOffsets)
				}
			}
		})
	}
}

// dropped sums the counter called name.
func dropped(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
