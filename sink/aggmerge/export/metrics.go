package export

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of one exporter; every series has the constant label table.
type metrics struct {
	records      prometheus.Counter
	transactions prometheus.Counter
	aborts       prometheus.Counter
	reinits      prometheus.Counter
	lag          *prometheus.GaugeVec
	version      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, table string) (*metrics, error) {
	labels := prometheus.Labels{"table": table}
	m := &metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_export_records_total", ConstLabels: labels,
			Help: "Changelog records produced in committed transactions."}),
		transactions: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_export_transactions_total", ConstLabels: labels,
			Help: "Transactions committed by the changelog exporter."}),
		aborts: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_export_aborts_total", ConstLabels: labels,
			Help: "Transactions that failed and were aborted (the producer is then re-initialised)."}),
		reinits: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_export_producer_inits_total", ConstLabels: labels,
			Help: "Producer (re-)initialisations: one at start, one after every failed transaction."}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ebbflow_export_lag_entries", ConstLabels: labels,
			Help: "Log entries of a bucket not yet exported or passed over (log end minus export position)."},
			[]string{"bucket"}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ebbflow_table_version", ConstLabels: labels,
			Help: "The table's last version published with its changelog (0: none yet)."}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.records, m.transactions, m.aborts, m.reinits, m.lag, m.version} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

// freshnessMetric is ebbflow_table_freshness_seconds: now minus the event
// time the exporter's last version covers (Freshness); absent while that
// is unknown.
type freshnessMetric struct {
	desc *prometheus.Desc
	x    *Exporter
}

func newFreshnessMetric(x *Exporter) freshnessMetric {
	return freshnessMetric{x: x, desc: prometheus.NewDesc("ebbflow_table_freshness_seconds",
		"Now minus the newest source event time the table's last version covers (absent while it covers none).",
		nil, prometheus.Labels{"table": x.cfg.Name})}
}

func (f freshnessMetric) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

func (f freshnessMetric) Collect(ch chan<- prometheus.Metric) {
	v, ok := f.x.LastVersion()
	if !ok {
		return
	}
	if d, ok := Freshness(f.x.cfg.Now(), &v); ok {
		ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, d.Seconds())
	}
}
