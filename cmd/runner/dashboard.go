package main

import (
	"bytes"
	"cmp"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// The web dashboard: static pages (web/, embedded) that poll the JSON
// endpoints below, which scripts may use as well. Everything a page shows
// comes from one of them; the pages hold no data and no token.

//go:embed web
var webFiles embed.FS

// dashboardPage is one page of the dashboard: web/page.html rendered with
// the page's name (which app.js draws) and title.
type dashboardPage struct{ Name, Title string }

// dashboardPages maps the dashboard's paths to their pages.
var dashboardPages = map[string]dashboardPage{
	"/":            {"jobs", "Jobs"},
	"/graph":       {"graph", "Job graph"},
	"/checkpoints": {"checkpoints", "Checkpoints"},
	"/tables":      {"tables", "Tables"},
	"/kafka":       {"kafka", "Kafka and changelogs"},
}

// pageTemplate is web/page.html.
var pageTemplate = template.Must(template.ParseFS(webFiles, "web/page.html"))

// renderPage renders a page once, when its route is set up: pages are
// static.
func renderPage(p dashboardPage) []byte {
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, p); err != nil {
		panic(fmt.Sprintf("dashboard page %s: %v", p.Name, err)) // the embedded template is fixed at build time
	}
	return b.Bytes()
}

// dashboardAsset returns the file in web/ of a script or style the pages
// load (/assets/<name>), if there is one.
func dashboardAsset(path string) (string, bool) {
	name, ok := strings.CutPrefix(path, "/assets/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	fi, err := fs.Stat(webFiles, "web/assets/"+name)
	return "assets/" + name, err == nil && fi.Mode().IsRegular()
}

// dashboardPath reports whether path is a page or an asset of the
// dashboard: static files that hold no data, which a browser may load
// without the token (see guard).
func dashboardPath(path string) bool {
	_, page := dashboardPages[path]
	_, asset := dashboardAsset(path)
	return page || asset
}

// dashboardCSP allows the pages their own scripts, styles and API, and
// nothing else: no inline script, no other origin, no framing.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

func (r *runner) dashboardRoutes(mux *http.ServeMux) {
	web, _ := fs.Sub(webFiles, "web")
	secure := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Content-Security-Policy", dashboardCSP)
			w.Header().Set("X-Frame-Options", "DENY")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Referrer-Policy", "no-referrer")
			w.Header().Set("Cache-Control", "no-cache")
			h.ServeHTTP(w, req)
		})
	}
	for path, page := range dashboardPages {
		pattern := "GET " + path
		if path == "/" {
			pattern = "GET /{$}"
		}
		html := renderPage(page)
		mux.Handle(pattern, secure(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			http.ServeContent(w, req, "", time.Time{}, bytes.NewReader(html))
		})))
	}
	mux.Handle("GET /assets/{name}", secure(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		file, ok := dashboardAsset(req.URL.Path)
		if !ok {
			http.NotFound(w, req)
			return
		}
		http.ServeFileFS(w, req, web, file)
	})))
	mux.HandleFunc("GET /api/v1/jobs/{name}/graph", r.apiGraph)
	mux.HandleFunc("GET /api/v1/jobs/{name}/checkpoints/history", r.apiCheckpointHistory)
	mux.HandleFunc("GET /api/v1/sources", r.apiSources)
	mux.HandleFunc("GET /api/v1/exporters", r.apiExporters)
	mux.HandleFunc("GET /api/v1/history", r.apiHistory)
}

// checkpointHistory is how many checkpoint events per job the runner keeps.
const checkpointHistory = 100

// historySamples and historyEvery: the series of /api/v1/history, one
// sample a second for the last 5 minutes.
const (
	historySamples = 300
	historyEvery   = time.Second
)

// dashboard holds what the runner keeps for the dashboard: the recent
// checkpoints of each job, heard from the runtime's listener, and samples
// of the jobs' progress. Its zero value is ready.
type dashboard struct {
	mu struct {
		sync.Mutex
		checkpoints map[string][]*checkpointEvent // per job, oldest first, at most checkpointHistory
		samples     []sample                      // oldest first, at most historySamples
	}
}

// checkpointEvent is one checkpoint of a job as the runtime reported it.
type checkpointEvent struct {
	ID        uint64    `json:"id"`
	Attempt   int       `json:"attempt"`
	Status    string    `json:"status"` // in_progress, completed or aborted
	Final     bool      `json:"final,omitempty"`
	Triggered time.Time `json:"triggered,omitzero"`
	Completed time.Time `json:"completed,omitzero"`
	// DurationMS, SizeBytes and AlignmentMS (the longest a subtask waited
	// for its inputs' barriers to align) are set for a completed checkpoint.
	DurationMS  *float64 `json:"duration_ms,omitempty"`
	SizeBytes   *int64   `json:"size_bytes,omitempty"`
	AlignmentMS *float64 `json:"alignment_ms,omitempty"`
	Error       string   `json:"error,omitempty"` // why it was aborted
}

// listen records the checkpoint events of job (a runtime.Listener: it
// only takes a lock).
func (d *dashboard) listen(job string, ev runtime.Event) {
	var status string
	switch ev.Kind {
	case runtime.EventCheckpointTriggered:
		status = "in_progress"
	case runtime.EventCheckpointCompleted:
		status = "completed"
	case runtime.EventCheckpointAborted:
		status = "aborted"
	default:
		return
	}
	c := ev.Checkpoint
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.checkpoints == nil {
		d.mu.checkpoints = map[string][]*checkpointEvent{}
	}
	events := d.mu.checkpoints[job]
	var e *checkpointEvent
	if n := len(events); n > 0 && events[n-1].ID == uint64(c.ID) && events[n-1].Attempt == ev.Attempt {
		e = events[n-1]
	} else {
		e = &checkpointEvent{ID: uint64(c.ID), Attempt: ev.Attempt}
		if len(events) == checkpointHistory {
			events = slices.Delete(events, 0, 1)
		}
		events = append(events, e)
		d.mu.checkpoints[job] = events
	}
	e.Status, e.Final, e.Triggered = status, c.Final, c.Triggered
	switch ev.Kind {
	case runtime.EventCheckpointCompleted:
		ms, size, aligned := millis(c.Duration), c.Size, millis(c.Alignment)
		e.Completed, e.DurationMS, e.SizeBytes, e.AlignmentMS = c.Completed, &ms, &size, &aligned
	case runtime.EventCheckpointAborted:
		e.Completed = ev.Time
		if ev.Err != nil {
			e.Error = ev.Err.Error()
		}
	}
}

// checkpoints returns the recent checkpoints of job, newest first.
func (d *dashboard) checkpoints(job string) []checkpointEvent {
	d.mu.Lock()
	defer d.mu.Unlock()
	events := d.mu.checkpoints[job]
	out := make([]checkpointEvent, 0, len(events))
	for i := len(events) - 1; i >= 0; i-- {
		out = append(out, *events[i])
	}
	return out
}

// sample is the progress of every job, exporter and source at one moment.
type sample struct {
	Time      time.Time                 `json:"time"`
	Jobs      map[string]jobSample      `json:"jobs"`
	Exporters map[string]exporterSample `json:"exporters,omitempty"`
	tasks     map[taskKey]runtime.TaskStatus
}

type jobSample struct {
	// RecordsRead is what the job's sources read since it started; the
	// rate is over the time since the previous sample.
	RecordsRead          int64    `json:"records_read"`
	RecordsReadPerS      *float64 `json:"records_read_per_s,omitempty"`
	SourceLag            int64    `json:"source_lag_records"`
	LastCheckpoint       *uint64  `json:"last_checkpoint,omitempty"`
	LastCheckpointMS     *float64 `json:"last_checkpoint_duration_ms,omitempty"`
	CheckpointsCompleted int      `json:"checkpoints_completed"`
	// at is when the job's status was read: the rates are over the time
	// between two of them, not between the samples' times, so that they
	// do not drift with the time a sample takes.
	at time.Time
}

type exporterSample struct {
	LagEntries uint64 `json:"lag_entries"`
}

type taskKey struct {
	job, chain string
	subtask    int
}

// sampler samples the jobs every historyEvery until stop is called, which
// waits for it.
func (r *runner) sampler() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(historyEvery)
		defer t.Stop()
		for {
			r.takeSample()
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// takeSample records a sample of every job and exporter.
func (r *runner) takeSample() {
	now := time.Now()
	s := sample{Time: now, Jobs: map[string]jobSample{}, Exporters: map[string]exporterSample{}, tasks: map[taskKey]runtime.TaskStatus{}}
	lags := map[string]int64{}
	for _, p := range r.sourcePartitions() {
		lags[p.Job] += p.Lag
	}
	_, prev := r.dash.lastSamples() // the newest so far: a copy
	for _, j := range r.jobs {
		st := j.Status()
		js := jobSample{SourceLag: lags[j.Name()], CheckpointsCompleted: st.Completed, at: time.Now()}
		for _, t := range st.Tasks {
			s.tasks[taskKey{j.Name(), t.Chain, t.Subtask}] = t
			if t.Source {
				js.RecordsRead += t.RecordsIn
			}
		}
		if c := st.LastCompleted; c != nil {
			id, ms := uint64(c.ID), millis(c.Duration)
			js.LastCheckpoint, js.LastCheckpointMS = &id, &ms
		}
		if prev != nil {
			if pj, ok := prev.Jobs[j.Name()]; ok {
				rate := perSecond(float64(js.RecordsRead-pj.RecordsRead), js.at.Sub(pj.at))
				js.RecordsReadPerS = &rate
			}
		}
		s.Jobs[j.Name()] = js
	}
	for _, x := range r.env.Exporters() {
		s.Exporters[x.Table] = exporterSample{LagEntries: exportLag(x)}
	}
	r.dash.mu.Lock()
	if len(r.dash.mu.samples) == historySamples {
		r.dash.mu.samples = slices.Delete(r.dash.mu.samples, 0, 1)
	}
	r.dash.mu.samples = append(r.dash.mu.samples, s)
	r.dash.mu.Unlock()
}

// statusTime is when the sample read job's status (the sample's time when
// it has none).
func (s *sample) statusTime(job string) time.Time {
	if at := s.Jobs[job].at; !at.IsZero() {
		return at
	}
	return s.Time
}

func perSecond(delta float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return delta / d.Seconds()
}

// lastSamples returns the two newest samples (nil when missing).
func (d *dashboard) lastSamples() (prev, last *sample) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.mu.samples)
	if n > 0 {
		s := d.mu.samples[n-1]
		last = &s
	}
	if n > 1 {
		s := d.mu.samples[n-2]
		prev = &s
	}
	return prev, last
}

func (r *runner) apiHistory(w http.ResponseWriter, _ *http.Request) {
	r.dash.mu.Lock()
	samples := slices.Clone(r.dash.mu.samples)
	r.dash.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"interval_seconds": historyEvery.Seconds(), "samples": samples})
}

// job finds a job by the {name} of the request, or answers 404.
func (r *runner) job(w http.ResponseWriter, req *http.Request) *build.Job {
	name := req.PathValue("name")
	for _, j := range r.jobs {
		if j.Name() == name {
			return j
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no job %q", name)})
	return nil
}

func (r *runner) apiCheckpointHistory(w http.ResponseWriter, req *http.Request) {
	if j := r.job(w, req); j != nil {
		writeJSON(w, http.StatusOK, map[string]any{"job": j.Name(), "capacity": checkpointHistory, "checkpoints": r.dash.checkpoints(j.Name())})
	}
}

// graphInfo is a job's graph: its chains, their subtasks' progress, and
// the edges between them.
type graphInfo struct {
	Job    string      `json:"job"`
	Chains []chainInfo `json:"chains"`
	Edges  []edgeInfo  `json:"edges"`
	// SampledAt is when the rates were measured, over the second before.
	SampledAt time.Time `json:"sampled_at,omitzero"`
}

type chainInfo struct {
	Name        string   `json:"name"`
	Operators   []string `json:"operators"`
	Parallelism int      `json:"parallelism"`
	Source      bool     `json:"source"`
	taskRates
	Subtasks []subtaskInfo `json:"subtasks"`
}

type subtaskInfo struct {
	Subtask int    `json:"subtask"`
	State   string `json:"state"`
	taskRates
}

// taskRates is the progress of a subtask, or the sum over a chain's:
// records and busy, backpressured and idle time (runtime.TaskStatus) since
// the job started, and their rates per second over the last sample
// interval, null before two samples.
type taskRates struct {
	RecordsIn            int64    `json:"records_in"`
	RecordsOut           int64    `json:"records_out"`
	BusyTotalMS          float64  `json:"busy_ms"`
	BackpressuredTotalMS float64  `json:"backpressured_ms"`
	IdleTotalMS          float64  `json:"idle_ms"`
	RecordsInPerS        *float64 `json:"records_in_per_s"`
	RecordsOutPerS       *float64 `json:"records_out_per_s"`
	BusyMSPerS           *float64 `json:"busy_ms_per_s"`
	BackpressuredMSPerS  *float64 `json:"backpressured_ms_per_s"`
	IdleMSPerS           *float64 `json:"idle_ms_per_s"`
}

type edgeInfo struct {
	From         string `json:"from"`
	To           string `json:"to"`
	Partitioning string `json:"partitioning"`
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func addPtr(p **float64, v float64) {
	if *p == nil {
		*p = new(float64)
	}
	**p += v
}

// add adds a subtask's progress (t, and the rates since prev when known
// over d) to the sums in x.
func (x *taskRates) add(t runtime.TaskStatus, prev *runtime.TaskStatus, d time.Duration) {
	x.RecordsIn += t.RecordsIn
	x.RecordsOut += t.RecordsOut
	x.BusyTotalMS += millis(t.BusyTime)
	x.BackpressuredTotalMS += millis(t.BackpressuredTime)
	x.IdleTotalMS += millis(t.IdleTime)
	if prev == nil || d <= 0 {
		return
	}
	addPtr(&x.RecordsInPerS, perSecond(float64(t.RecordsIn-prev.RecordsIn), d))
	addPtr(&x.RecordsOutPerS, perSecond(float64(t.RecordsOut-prev.RecordsOut), d))
	addPtr(&x.BusyMSPerS, perSecond(millis(t.BusyTime-prev.BusyTime), d))
	addPtr(&x.BackpressuredMSPerS, perSecond(millis(t.BackpressuredTime-prev.BackpressuredTime), d))
	addPtr(&x.IdleMSPerS, perSecond(millis(t.IdleTime-prev.IdleTime), d))
}

func (r *runner) apiGraph(w http.ResponseWriter, req *http.Request) {
	j := r.job(w, req)
	if j == nil {
		return
	}
	prev, last := r.dash.lastSamples()
	writeJSON(w, http.StatusOK, graphOf(j.Name(), j.Status().Tasks, j.Edges(), prev, last))
}

// graphOf describes the graph of job, its current tasks and edges; the
// progress is that of the newest sample (last), the rates between it and
// the one before (prev). Either may be nil.
func graphOf(job string, tasks []runtime.TaskStatus, edges []runtime.Edge, prev, last *sample) graphInfo {
	g := graphInfo{Job: job, Chains: []chainInfo{}, Edges: []edgeInfo{}}
	var d time.Duration
	if prev != nil && last != nil {
		d = last.statusTime(job).Sub(prev.statusTime(job))
	}
	if last != nil {
		g.SampledAt = last.statusTime(job)
	}
	index := map[string]int{}
	for _, t := range tasks {
		// The sampled status, so the counts and their rates agree; a
		// task not sampled yet shows its current counts.
		k := taskKey{job, t.Chain, t.Subtask}
		var before *runtime.TaskStatus
		if last != nil {
			if s, ok := last.tasks[k]; ok {
				t = s
				if prev != nil {
					if p, ok := prev.tasks[k]; ok {
						before = &p
					}
				}
			}
		}
		i, ok := index[t.Chain]
		if !ok {
			i = len(g.Chains)
			index[t.Chain] = i
			g.Chains = append(g.Chains, chainInfo{Name: t.Chain, Operators: t.Operators, Parallelism: t.Parallelism, Source: t.Source})
		}
		c := &g.Chains[i]
		sub := subtaskInfo{Subtask: t.Subtask, State: string(t.State)}
		sub.add(t, before, d)
		c.add(t, before, d)
		c.Subtasks = append(c.Subtasks, sub)
	}
	for _, e := range edges {
		g.Edges = append(g.Edges, edgeInfo{From: e.From, To: e.To, Partitioning: e.Partitioning})
	}
	return g
}

// sourcePartition is the lag of one partition a Kafka source subtask reads.
type sourcePartition struct {
	Job       string `json:"job"`
	Operator  string `json:"operator"`
	Subtask   int    `json:"subtask"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Lag       int64  `json:"lag_records"`
}

// sourcePartitions reads the Kafka sources' lag per partition from their
// metric (ebbflow_source_lag_records), sorted.
func (r *runner) sourcePartitions() []sourcePartition {
	out := []sourcePartition{}
	mfs, err := r.reg.Gather()
	if err != nil {
		r.log.Debug("gather metrics", "err", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ebbflow_source_lag_records" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := labels(m)
			sub, _ := strconv.Atoi(l["subtask"])
			part, _ := strconv.Atoi(l["partition"])
			out = append(out, sourcePartition{Job: l["job"], Operator: l["operator"], Subtask: sub, Topic: l["topic"], Partition: part,
				Lag: int64(m.GetGauge().GetValue())})
		}
	}
	slices.SortFunc(out, func(a, b sourcePartition) int {
		return cmp.Or(strings.Compare(a.Job, b.Job), strings.Compare(a.Operator, b.Operator), strings.Compare(a.Topic, b.Topic),
			a.Partition-b.Partition)
	})
	return out
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func (r *runner) apiSources(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"partitions": r.sourcePartitions()})
}

// exporterInfo is a changelog exporter in the API.
type exporterInfo struct {
	Table           string         `json:"table"`
	Topic           string         `json:"topic"`
	Cluster         string         `json:"cluster"`
	Mode            string         `json:"mode"`
	Format          string         `json:"format"`
	TransactionalID string         `json:"transactional_id"`
	LagEntries      uint64         `json:"lag_entries"`
	LastCommit      time.Time      `json:"last_commit,omitzero"`
	Buckets         []bucketExport `json:"buckets"`
}

type bucketExport struct {
	Bucket   int    `json:"bucket"`
	LogEnd   uint64 `json:"log_end"`
	Exported uint64 `json:"exported"`
	Lag      uint64 `json:"lag_entries"`
}

// exportLag is the log entries of every bucket not yet exported.
func exportLag(x build.ExporterStatus) uint64 {
	var lag uint64
	for b, end := range x.LogEnds {
		if b < len(x.Exported) && x.Exported[b] < end {
			lag += end - x.Exported[b]
		}
	}
	return lag
}

func (r *runner) apiExporters(w http.ResponseWriter, _ *http.Request) {
	out := []exporterInfo{}
	for _, x := range r.env.Exporters() {
		info := exporterInfo{Table: x.Table, Topic: x.Topic, Cluster: x.Cluster, Mode: x.Mode, Format: x.Format,
			TransactionalID: x.TransactionalID, LagEntries: exportLag(x), LastCommit: x.LastCommit, Buckets: []bucketExport{}}
		for b, end := range x.LogEnds {
			be := bucketExport{Bucket: b, LogEnd: end}
			if b < len(x.Exported) {
				be.Exported = x.Exported[b]
			}
			if be.Exported < end {
				be.Lag = end - be.Exported
			}
			info.Buckets = append(info.Buckets, be)
		}
		out = append(out, info)
	}
	writeJSON(w, http.StatusOK, out)
}

// tableDetail is what the dashboard shows of a table beyond tableInfo.
type tableDetail struct {
	LogEntries uint64      `json:"log_entries"`
	Log        []bucketLog `json:"log"`
	// Holders hold the log (writers' sinks, exporters); RetainFrom is, per
	// bucket, the lowest offset one of them still needs.
	Holders    []string     `json:"holders"`
	RetainFrom []uint64     `json:"retain_from"`
	Writers    []writerInfo `json:"writers"`
	Error      string       `json:"error,omitempty"`
}

type bucketLog struct {
	Bucket  int    `json:"bucket"`
	Start   uint64 `json:"start"`
	End     uint64 `json:"end"`
	Entries uint64 `json:"entries"`
}

// writerInfo is a writer registered with the table and, when it restored a
// checkpoint in this run, what its undo did.
type writerInfo struct {
	aggmerge.Registration
	LastUndo *undoInfo `json:"last_undo,omitempty"`
}

type undoInfo struct {
	EntriesScanned int64   `json:"entries_scanned"`
	KeysRestored   int64   `json:"keys_restored"`
	DurationMS     float64 `json:"duration_ms"`
}

// undos reads what the writers' last undo did from their metrics
// (ebbflow_sink_undo_*), by writer id (base.WriterID of the labels job,
// operator and subtask).
func (r *runner) undos() map[string]*undoInfo {
	out := map[string]*undoInfo{}
	mfs, _ := r.reg.Gather()
	for _, mf := range mfs {
		set := map[string]func(*undoInfo, float64){
			"ebbflow_sink_undo_entries_scanned":  func(u *undoInfo, v float64) { u.EntriesScanned = int64(v) },
			"ebbflow_sink_undo_keys_restored":    func(u *undoInfo, v float64) { u.KeysRestored = int64(v) },
			"ebbflow_sink_undo_duration_seconds": func(u *undoInfo, v float64) { u.DurationMS = v * 1000 },
		}[mf.GetName()]
		if set == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := labels(m)
			subtask, err := strconv.Atoi(l["subtask"])
			if err != nil {
				continue
			}
			id := base.WriterID{Job: l["job"], Sink: l["operator"], Subtask: subtask}.String()
			if out[id] == nil {
				out[id] = &undoInfo{}
			}
			set(out[id], m.GetGauge().GetValue())
		}
	}
	return out
}

// tableDetail describes table t's log, holds and writers; undos is from
// r.undos.
func tableDetailOf(t *aggmerge.Table, undos map[string]*undoInfo) tableDetail {
	d := tableDetail{Log: []bucketLog{}, Writers: []writerInfo{}}
	var errs []error
	for b := range t.Schema().Buckets {
		start, end, err := t.LogOffsets(b)
		errs = append(errs, err)
		d.Log = append(d.Log, bucketLog{Bucket: b, Start: start, End: end, Entries: end - start})
		d.LogEntries += end - start
	}
	var err error
	d.Holders, err = t.Holders()
	errs = append(errs, err)
	d.RetainFrom, err = t.RetainFrom()
	errs = append(errs, err)
	for _, reg := range t.Writers() {
		d.Writers = append(d.Writers, writerInfo{Registration: reg, LastUndo: undos[reg.Writer]})
	}
	if err := errors.Join(errs...); err != nil {
		d.Error = err.Error()
	}
	return d
}
