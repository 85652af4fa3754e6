package repartition

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are stage 1's: what it sent and how its transactions ended.
// The registerer given to NewMetrics adds the job's labels.
type Metrics struct {
	sent, committed, aborted, failures prometheus.Counter
	skipped, deadLettered              prometheus.Counter
	refused                            prometheus.Counter // stage 2: ErrColumns
	owned, input                       prometheus.Gauge
	// Dynamic ownership (Owners).
	rebalances, rowsRebuilt prometheus.Counter
	handoverSeconds         prometheus.Histogram
	seals, changelog        prometheus.Counter // what the Publishers committed
}

// NewMetrics registers stage 1's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	txns := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbflow_repartition_transactions_total",
		Help: "Stage-1 transactions ended, by result: committed (the rows and the input offsets), or aborted (a rebalance, a failed write, a fenced writer)."},
		[]string{"result"})
	failed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbflow_repartition_records_failed_total",
		Help: "Input records stage 1 could not map (decode, transforms, the row), by what on_error did: skipped or dead_lettered (counted again when their transaction aborted and they are read again)."},
		[]string{"action"})
	m := &Metrics{
		skipped:      failed.WithLabelValues("skipped"),
		deadLettered: failed.WithLabelValues("dead_lettered"),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_repartition_rows_sent_total",
			Help: "Partial rows sent to the repartition topic, in committed and aborted transactions."}),
		committed: txns.WithLabelValues("committed"),
		aborted:   txns.WithLabelValues("aborted"),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ebbflow_repartition_owned_partitions",
			Help: "Repartition partitions (buckets) this instance owns and applies."}),
		input: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ebbflow_repartition_input_partitions",
			Help: "Input partitions the consumer group assigned to this instance's stage 1."}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_repartition_rebalances_total",
			Help: "Assignments of the owners group (<job>.owners) that stage 2 started again on (dynamic ownership)."}),
		rowsRebuilt: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_repartition_rows_rebuilt_total",
			Help: "Rows written to the table from the owner log by handovers (dynamic ownership)."}),
		handoverSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ebbflow_repartition_handover_seconds",
			Help:    "Time from an assignment of the owners group to stage 2 applying it: the stop of the previous stage 2, the handovers (fence, read, rebuild, claim) and the start (dynamic ownership).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		seals: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_repartition_seals_total",
			Help: "Checkpoints of stage 2 the Publishers committed to the owner log, a seal per owned bucket that changed (dynamic ownership)."}),
		changelog: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_repartition_changelog_records_total",
			Help: "Changelog records the Publishers committed with their seals: the table's changelog under dynamic ownership."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_repartition_records_refused_total",
			Help: "Repartition records stage 2 refused: of a job that writes no column of the table here, or writing columns its job does not own (the source's on_error then fails, skips or dead-letters them; counted again when read again)."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_repartition_failures_total",
			Help: "Stage-1 sessions that failed and were started again after a backoff (a broker outage: a poll, a write or a commit failing)."}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.sent, txns, m.owned, m.input, m.failures, failed, m.rebalances, m.rowsRebuilt, m.handoverSeconds, m.refused, m.seals, m.changelog} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

// Owned records how many repartition partitions the instance owns.
func (m *Metrics) Owned(n int) { m.owned.Set(float64(n)) }

// inputPartitions records how many input partitions st says are assigned
// (nothing on nil Metrics).
func (m *Metrics) inputPartitions(st *Status) {
	if m == nil {
		return
	}
	n := 0
	for _, ps := range st.Assigned() {
		n += len(ps)
	}
	m.input.Set(float64(n))
}

// ownedPartitions records how many partitions stage 2 applies now (nothing
// on nil Metrics).
func (m *Metrics) ownedPartitions(n int) {
	if m != nil {
		m.Owned(n)
	}
}

func (m *Metrics) refuse() {
	if m != nil {
		m.refused.Inc()
	}
}

func (m *Metrics) rebalance() {
	if m != nil {
		m.rebalances.Inc()
	}
}

func (m *Metrics) rebuilt(rows int) {
	if m != nil {
		m.rowsRebuilt.Add(float64(rows))
	}
}

func (m *Metrics) handover(d time.Duration) {
	if m != nil {
		m.handoverSeconds.Observe(d.Seconds())
	}
}

// sealed records a seal committed with its changelog records (nothing on
// nil Metrics).
func (m *Metrics) sealed(changelog int) {
	if m != nil {
		m.seals.Inc()
		m.changelog.Add(float64(changelog))
	}
}
