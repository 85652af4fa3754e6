package runtime_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// counter returns the value of a counter with the given status label.
func counter(t *testing.T, reg *prometheus.Registry, name, status string) float64 {
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
				if l.GetName() == "status" && l.GetValue() == status {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{status=%q} not found", name, status)
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
