package main

import (
	"strings"
	"time"
)

// summaries logs a line per job every --summary: table rows, completed
// checkpoints, the records/s its sources read (from the job's Status) and,
// while it runs, the embedded broker's address (to produce into it). It
// returns the function that stops it and waits.
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
				secs := now.Sub(lastAt).Seconds()
				lastAt = now
				for _, j := range r.jobs {
					st := j.Status()
					var read float64
					for _, t := range st.Tasks {
						if t.Source {
							read += float64(t.RecordsIn)
						}
					}
					p := j.Pipeline()
					var rows uint64
					for _, t := range p.Tables {
						if tab, ok := r.env.Table(t.Spec.Name); ok {
							rows += tab.Count()
						}
					}
					attrs := []any{"job", j.Name(), "phase", r.status(j).Phase, "rows", rows, "checkpoints", st.Completed,
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
