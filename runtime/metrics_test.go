package runtime_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
)

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// counter returns the value of a counter with the given status label.
func counter(t *testing.T, reg *prometheus.Registry, name, status string) float64 {
	t.Helper()
	return labeled(t, reg, name, "status", status)
}

// labeled returns the value of the counter name{label=value}.
func labeled(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{%s=%q} not found", name, label, value)
	return 0
}

// restarts returns the job's restart count.
func restarts(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ebbflow_job_restarts_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("ebbflow_job_restarts_total not registered")
	return 0
}

// TestSameJobTwiceOnOneRegisterer: a job run a second time under the same
// name on the same Registerer (a runner running it again) replaces the
// first run's metrics instead of panicking on their registration.
func TestSameJobTwiceOnOneRegisterer(t *testing.T) {
	reg := newRegistry()
	for run := range 2 {
		j := runtime.NewJob(runtime.Options{Name: "twice", DataDir: t.TempDir(), Registerer: reg})
		src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: 100}))
		runtime.SinkTo(src, "discard", operators.NewDiscard[operators.Event](nil))
		if err := j.Run(context.Background()); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if n := counter(t, reg, "ebbflow_checkpoints_total", "completed"); n < 1 {
			t.Fatalf("run %d: %v completed checkpoints counted, want at least 1", run, n)
		}
	}
}
