package main

import (
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// summaries logs a line per job every --summary: table rows, completed
// checkpoints, the records/s its sources read and, while it runs, the
// embedded broker's address (to produce into it). It returns the function
// that stops it and waits.
func (r *runner) summaries() func() {
	every := r.flags.summary
	if every <= 0 {
		return func() {}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		last := map[string]float64{}
		lastAt := time.Now()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				mfs, err := r.reg.Gather()
				if err != nil {
					r.log.Warn("gather metrics", "err", err)
					continue
				}
				secs := now.Sub(lastAt).Seconds()
				lastAt = now
				for _, j := range r.jobs {
					p := j.Pipeline()
					var sources []string
					for _, s := range p.Spec.Sources {
						sources = append(sources, s.Name)
					}
					read := sum(mfs, "ebbflow_operator_records_in_total", func(l map[string]string) bool {
						return l["job"] == j.Name() && slices.Contains(sources, l["operator"])
					})
					cps := sum(mfs, "ebbflow_checkpoints_total", func(l map[string]string) bool {
						return l["job"] == j.Name() && l["status"] == "completed"
					})
					var rows uint64
					for _, t := range p.Tables {
						if tab, ok := r.env.Table(t.Spec.Name); ok {
							rows += tab.Count()
						}
					}
					attrs := []any{"job", j.Name(), "phase", r.status(j).Phase, "rows", rows, "checkpoints", int64(cps),
						"records", int64(read), "records_per_s", int64((read - last[j.Name()]) / secs)}
					if b := r.env.EmbeddedBrokers(); len(b) > 0 {
						attrs = append(attrs, "embedded_kafka", strings.Join(b, ","))
					}
					r.log.Info("summary", attrs...)
					last[j.Name()] = read
				}
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// sum adds the values of a counter's series whose labels match.
func sum(mfs []*dto.MetricFamily, name string, match func(map[string]string) bool) float64 {
	var total float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if match(labels) && m.GetCounter() != nil {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
