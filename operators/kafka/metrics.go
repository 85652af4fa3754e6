package kafka

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of one source subtask; the runtime's Registerer adds the job,
// operator and subtask labels.
type metrics struct {
	records, bytes prometheus.Counter
	fetchErrors    prometheus.Counter
	dropped        prometheus.Counter // reason="decode_error"
	deadLettered   prometheus.Counter
	lag            *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_source_records_read_total",
			Help: "Records handed to the pipeline (decoded, or dropped or dead-lettered by the error policy)."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_source_bytes_read_total",
			Help: "Key and value bytes of the records read."}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_source_fetch_errors_total",
			Help: "Failed broker connections and requests, and partition errors in fetches (all retried)."}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_source_records_dead_lettered_total",
			Help: "Undecodable records written to the dead-letter topic."}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ebbflow_source_lag_records",
			Help: "Records between the next offset to read and the partition's high watermark, as of the last fetch."},
			[]string{"topic", "partition"}),
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbflow_source_records_dropped_total",
		Help: "Records the source dropped, by reason."}, []string{"reason"})
	m.dropped = dropped.WithLabelValues("decode_error")
	var errs []error
	for _, c := range []prometheus.Collector{m.records, m.bytes, m.fetchErrors, dropped, m.deadLettered, m.lag} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}
