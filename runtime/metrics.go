package runtime

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the job's Prometheus metrics, registered once per Job on the
// injected Registerer (a private registry when none is given). Records are
// counted per batch, never per record.
type metrics struct {
	job              string
	recordsInVec     *prometheus.CounterVec
	recordsOutVec    *prometheus.CounterVec
	checkpoints      *prometheus.CounterVec
	aborts           *prometheus.CounterVec
	inProgress       prometheus.Gauge
	duration         prometheus.Histogram
	lastDuration     prometheus.Gauge
	lastSize         prometheus.Gauge
	lastID           prometheus.Gauge
	lastCompleted    prometheus.Gauge
	alignmentSeconds prometheus.Histogram
	syncSeconds      prometheus.Histogram
	restarts         prometheus.Counter
	restores         prometheus.Counter
	watermarks       *prometheus.GaugeVec
	// counters resolved per operator once, so the hot path does no lookup
	in, out map[string]prometheus.Counter
}

// newMetrics registers the job's metrics; tasks are the subtasks whose
// busy, backpressured and idle time it exports.
func newMetrics(reg prometheus.Registerer, job string, uids []string, tasks []*taskStat) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	// A job of the same name run again on the same Registerer (a runner
	// running it a second time) replaces the first one's metrics.
	reg = replacingRegisterer{prometheus.WrapRegistererWith(prometheus.Labels{"job": job}, reg)}
	m := &metrics{
		job: job,
		recordsInVec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbflow_operator_records_in_total",
			Help: "Records received by the first operator of each chain (sources: records read)."}, []string{"operator"}),
		recordsOutVec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbflow_operator_records_out_total",
			Help: "Records sent by an operator to other subtasks."}, []string{"operator"}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbflow_checkpoints_total",
			Help: "Checkpoints by outcome."}, []string{"status"}),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ebbflow_checkpoint_aborts_total",
			Help: "Checkpoints aborted, by reason: timeout, alignment_timeout, declined, metadata, trigger_failed, attempt_ended."}, []string{"reason"}),
		inProgress: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ebbflow_checkpoints_in_progress",
			Help: "Checkpoints triggered and not yet completed or aborted."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ebbflow_checkpoint_duration_seconds",
			Help: "Time from trigger to completion of checkpoints.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		lastDuration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ebbflow_last_checkpoint_duration_seconds",
			Help: "Duration of the last completed checkpoint."}),
		lastSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ebbflow_last_checkpoint_size_bytes",
			Help: "Bytes of the last completed checkpoint's files: its metadata (holding operator state) and its state files."}),
		lastID: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ebbflow_last_checkpoint_id",
			Help: "Id of the last completed checkpoint."}),
		lastCompleted: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ebbflow_last_checkpoint_completed_timestamp_seconds",
			Help: "Unix time the last checkpoint completed."}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ebbflow_checkpoint_sync_seconds",
			Help:    "Time a subtask's goroutine spends taking its snapshot at a barrier (the part of a checkpoint that stops its processing).",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 20)}),
		alignmentSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ebbflow_checkpoint_alignment_seconds",
			Help: "Time subtasks spent aligning barriers (first to last barrier).", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_job_restarts_total",
			Help: "In-process restarts after a failure."}),
		restores: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebbflow_restores_total",
			Help: "Runs that restored a checkpoint."}),
		watermarks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ebbflow_task_watermark_seconds",
			Help: "Event time (Unix seconds) of each subtask: the last watermark it advanced to; absent before the first."}, []string{"operator", "subtask"}),
		in:  map[string]prometheus.Counter{},
		out: map[string]prometheus.Counter{},
	}
	reg.MustRegister(m.recordsInVec, m.recordsOutVec, m.checkpoints, m.aborts, m.inProgress, m.duration, m.lastDuration,
		m.lastSize, m.lastID, m.lastCompleted, m.alignmentSeconds, m.syncSeconds, m.restarts, m.restores, m.watermarks,
		newTaskTimeCollector(tasks))
	for _, s := range []string{"completed", "failed"} {
		m.checkpoints.WithLabelValues(s)
	}
	for _, c := range abortCauses {
		m.aborts.WithLabelValues(string(c))
	}
	for _, u := range uids {
		m.in[u] = m.recordsInVec.WithLabelValues(u)
		m.out[u] = m.recordsOutVec.WithLabelValues(u)
	}
	return m
}

// taskTimeCollector exports each subtask's busy, backpressured and idle
// time, read from its taskTime at scrape time: the task goroutine touches
// no Prometheus counter for it.
type taskTimeCollector struct {
	tasks          []*taskStat
	busy, bp, idle *prometheus.Desc
}

func newTaskTimeCollector(tasks []*taskStat) *taskTimeCollector {
	labels := []string{"operator", "subtask"}
	return &taskTimeCollector{tasks: tasks,
		busy: prometheus.NewDesc("ebbflow_task_busy_seconds_total",
			"Time a subtask spent processing (operator: the first of its chain).", labels, nil),
		bp: prometheus.NewDesc("ebbflow_task_backpressured_seconds_total",
			"Time a subtask spent waiting for room in a full downstream queue (operator: the first of its chain).", labels, nil),
		idle: prometheus.NewDesc("ebbflow_task_idle_seconds_total",
			"Time a subtask spent waiting for input, a timer or a checkpoint, and a source's reads that returned nothing (operator: the first of its chain).", labels, nil),
	}
}

func (c *taskTimeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.busy
	ch <- c.bp
	ch <- c.idle
}

func (c *taskTimeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.tasks {
		uid, sub := s.chain.nodes[0].uid, strconv.Itoa(s.subtask)
		busy, bp, idle := s.time.totals()
		ch <- prometheus.MustNewConstMetric(c.busy, prometheus.CounterValue, busy.Seconds(), uid, sub)
		ch <- prometheus.MustNewConstMetric(c.bp, prometheus.CounterValue, bp.Seconds(), uid, sub)
		ch <- prometheus.MustNewConstMetric(c.idle, prometheus.CounterValue, idle.Seconds(), uid, sub)
	}
}

func (m *metrics) recordsIn(uid string, n int) {
	if n > 0 {
		m.in[uid].Add(float64(n))
	}
}

func (m *metrics) recordsOut(uid string) func(int) {
	c := m.out[uid]
	return func(n int) { c.Add(float64(n)) }
}

func (m *metrics) alignment(d time.Duration) { m.alignmentSeconds.Observe(d.Seconds()) }

// registerer gives an operator subtask a Registerer labelled with its
// operator and subtask. A restart registers the same metrics again: the
// new collector replaces the old one. Metrics stay registered when the job
// ends, with their last values.
func (t *task) registerer(uid string) prometheus.Registerer {
	reg := t.att.job.opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return replacingRegisterer{prometheus.WrapRegistererWith(prometheus.Labels{"job": t.att.job.opts.Name, "operator": uid,
		"subtask": strconv.Itoa(t.subtask)}, reg)}
}

// replacingRegisterer registers a collector in place of an equal one
// registered before (by an earlier attempt or run of the job).
type replacingRegisterer struct{ prometheus.Registerer }

func (r replacingRegisterer) Register(c prometheus.Collector) error {
	err := r.Registerer.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		r.Registerer.Unregister(are.ExistingCollector)
		err = r.Registerer.Register(c)
	}
	return err
}

func (r replacingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
