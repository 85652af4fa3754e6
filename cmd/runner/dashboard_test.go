package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
)

// dashboardCount is the orders the dashboard tests' quickstart generates:
// once the job has read them its counts stand still, while checkpoints
// go on.
const dashboardCount = 600

// dashboardRunner runs the quickstart with a bounded generator and quick
// checkpoints on a data directory (dir, or a fresh temporary one when
// empty) and waits until it has read, sampled and exported want orders
// (every one on a fresh directory, none after a stop); it returns the
// runner, its data directory and its base URL.
func dashboardRunner(t *testing.T, dir string, want int64) (*child, string, string) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	c := start(t, nil, "run", "-f", quickstart, "--data-dir", dir, "--http-address", "127.0.0.1:0", "--summary", "0",
		"--set", fmt.Sprintf("source.datagen.count=%d", dashboardCount), "--set", "source.datagen.rate=2000",
		"--set", "checkpoint.interval=200ms")
	var addr string
	waitFor(t, c, 60*time.Second, "the runner's address", func() bool { addr = liveRunner(dir); return addr != "" })
	base := "http://" + addr
	waitFor(t, c, 60*time.Second, "every order read, sampled and exported", func() bool {
		var h struct{ Samples []sample }
		var g graphInfo
		var xs []exporterInfo
		getJSON(t, base+"/api/v1/history", &h)
		getJSON(t, base+"/api/v1/jobs/quickstart/graph", &g)
		getJSON(t, base+"/api/v1/exporters", &xs)
		// The rates need two samples of the running tasks.
		return len(h.Samples) > 1 && h.Samples[len(h.Samples)-1].Jobs["quickstart"].RecordsRead == want &&
			len(g.Chains) > 0 && g.Chains[0].RecordsInPerS != nil &&
			len(xs) == 1 && xs[0].LagEntries == 0 && (want == 0 || !xs[0].LastCommit.IsZero())
	})
	return c, dir, base
}

// getJSON gets url (which must answer 200) into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, body := httpGet(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

// TestDashboardAPI runs the quickstart and reads every endpoint the
// dashboard shows: the graph (chains, the edge between them, records per
// chain agreeing with the job's tasks), the checkpoint history (agreeing
// with the job's status), the tables' log, holds and writers, the source
// lag per partition, the exporter and the sampled history. A restart
// shows the writers' new epoch and their undo.
func TestDashboardAPI(t *testing.T) {
	c, dir, base := dashboardRunner(t, "", dashboardCount)
	var g graphInfo
	getJSON(t, base+"/api/v1/jobs/quickstart/graph", &g)
	if len(g.Chains) != 2 || len(g.Edges) != 1 || g.Edges[0].From != g.Chains[0].Name || g.Edges[0].To != g.Chains[1].Name ||
		g.Edges[0].Partitioning != "custom" {
		t.Fatalf("graph: %+v", g)
	}
	for _, ch := range g.Chains {
		if ch.Parallelism != 2 || len(ch.Subtasks) != 2 || ch.RecordsInPerS == nil || ch.BusyMSPerS == nil || ch.BackpressuredMSPerS == nil ||
			ch.IdleMSPerS == nil || ch.BusyTotalMS+ch.IdleTotalMS <= 0 {
			t.Errorf("chain %+v: want 2 subtasks, records and busy, backpressured and idle time per second", ch)
		}
	}
	// Every paid order crossed the edge.
	if g.Chains[0].RecordsOut != g.Chains[1].RecordsIn || g.Chains[1].RecordsIn == 0 {
		t.Errorf("records: %d sent by %q, %d received by %q", g.Chains[0].RecordsOut, g.Chains[0].Name, g.Chains[1].RecordsIn, g.Chains[1].Name)
	}

	var jobs []jobStatus
	var hist struct {
		Capacity    int
		Checkpoints []checkpointEvent
	}
	getJSON(t, base+"/api/v1/jobs/quickstart/checkpoints/history", &hist)
	getJSON(t, base+"/api/v1/jobs", &jobs)
	if len(hist.Checkpoints) == 0 || hist.Capacity != checkpointHistory || jobs[0].UptimeSeconds <= 0 || jobs[0].StateSince.IsZero() {
		t.Fatalf("history %+v, jobs %+v", hist, jobs)
	}
	var completed []checkpointEvent
	for _, e := range hist.Checkpoints {
		if e.Status == "completed" {
			completed = append(completed, e)
		}
	}
	// Newest first; the job's last completed checkpoint, read after the
	// history, is the history's newest completed one or later.
	if newest := completed[0]; *jobs[0].LastCheckpoint < newest.ID || newest.DurationMS == nil || newest.SizeBytes == nil ||
		newest.Completed.Before(newest.Triggered) || len(completed) < 2 || completed[1].ID >= newest.ID {
		t.Fatalf("history %+v, last checkpoint %d", hist.Checkpoints, *jobs[0].LastCheckpoint)
	}
	if code, _ := httpGet(t, base+"/api/v1/jobs/nope/checkpoints/history"); code != http.StatusNotFound {
		t.Errorf("history of an unknown job: %d", code)
	}
	if code, _ := httpGet(t, base+"/api/v1/jobs/nope/graph"); code != http.StatusNotFound {
		t.Errorf("graph of an unknown job: %d", code)
	}

	var tables []tableInfo
	getJSON(t, base+"/api/v1/tables", &tables)
	tab := tables[0]
	var logged uint64
	for _, b := range tab.Log {
		logged += b.Entries
	}
	if len(tab.Log) != 4 || logged != tab.LogEntries || len(tab.RetainFrom) != 4 || len(tab.Writers) != 2 ||
		!strings.Contains(strings.Join(tab.Holders, ","), "quickstart/revenue") || tab.Error != "" {
		t.Fatalf("table %+v", tab)
	}
	for _, w := range tab.Writers {
		if w.Epoch != 1 || w.Job != "quickstart" || !w.Wrote || w.LastUndo != nil {
			t.Errorf("writer %+v: want epoch 1, no undo", w)
		}
	}

	var sources struct{ Partitions []sourcePartition }
	getJSON(t, base+"/api/v1/sources", &sources)
	if p := sources.Partitions; len(p) != 2 || p[0].Topic != "orders" || p[0].Partition != 0 || p[1].Partition != 1 || p[0].Lag != 0 {
		t.Fatalf("sources %+v", sources)
	}
	var xs []exporterInfo
	getJSON(t, base+"/api/v1/exporters", &xs)
	if x := xs[0]; x.Table != "revenue" || x.Topic != "revenue-changelog" || x.Mode != "committed" || x.Format != "upsert-json" ||
		x.Cluster != "embedded" || len(x.Buckets) != 4 {
		t.Fatalf("exporters %+v", xs)
	}

	var history struct {
		IntervalSeconds float64 `json:"interval_seconds"`
		Samples         []sample
	}
	getJSON(t, base+"/api/v1/history", &history)
	last := history.Samples[len(history.Samples)-1]
	if history.IntervalSeconds != 1 || len(history.Samples) < 2 || last.Jobs["quickstart"].RecordsReadPerS == nil ||
		last.Jobs["quickstart"].LastCheckpoint == nil {
		t.Fatalf("history %+v", history)
	}
	// The samples' records read only grow, up to every order.
	var prev int64
	for _, s := range history.Samples {
		if n := s.Jobs["quickstart"].RecordsRead; n < prev || n > dashboardCount {
			t.Fatalf("records read %d after %d (of %d) in %+v", n, prev, dashboardCount, history.Samples)
		} else {
			prev = n
		}
	}

	// Restarted, each writer registers again (epoch 2) and undoes what
	// was written after the restored checkpoint (nothing, after a stop).
	stopGracefully(t, c)
	c, _, base = dashboardRunner(t, dir, 0)
	getJSON(t, base+"/api/v1/tables", &tables)
	for _, w := range tables[0].Writers {
		if w.Epoch != 2 || w.LastUndo == nil || w.LastUndo.KeysRestored != 0 {
			t.Errorf("writer after a restart %+v (undo %+v): want epoch 2, an undo that restored no key", w, w.LastUndo)
		}
	}
	stopGracefully(t, c)
}

// TestCheckpointHistoryRing feeds the dashboard's listener the checkpoint
// events of two attempts: each checkpoint is one entry (in progress, then
// completed or aborted with its reason), newest first, at most
// checkpointHistory per job; state events are not checkpoints.
func TestCheckpointHistoryRing(t *testing.T) {
	var d dashboard
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	info := func(id int) runtime.CheckpointInfo {
		return runtime.CheckpointInfo{ID: barrier.CheckpointID(id), Triggered: t0.Add(time.Duration(id) * time.Second)}
	}
	d.listen("j", runtime.Event{Kind: runtime.EventState, State: runtime.StateRunning})
	d.listen("j", runtime.Event{Kind: runtime.EventCheckpointTriggered, Checkpoint: info(0)})
	if got := d.checkpoints("j"); len(got) != 1 || got[0].Status != "in_progress" || got[0].DurationMS != nil {
		t.Fatalf("in progress: %+v", got)
	}
	done := info(0)
	done.Completed, done.Duration, done.Size, done.Alignment = done.Triggered.Add(30*time.Millisecond), 30*time.Millisecond, 4096, 7*time.Millisecond
	d.listen("j", runtime.Event{Kind: runtime.EventCheckpointCompleted, Checkpoint: done})
	d.listen("j", runtime.Event{Kind: runtime.EventCheckpointTriggered, Checkpoint: info(1)})
	d.listen("j", runtime.Event{Kind: runtime.EventCheckpointAborted, Checkpoint: info(1), Time: t0.Add(time.Minute),
		Err: errors.New("checkpoint 1 timed out after 10m0s")})
	// The next attempt takes checkpoint 1 again, aborted before it began.
	d.listen("j", runtime.Event{Kind: runtime.EventCheckpointAborted, Attempt: 1, Checkpoint: info(1), Err: errors.New("make folder: no space")})
	got := d.checkpoints("j")
	if len(got) != 3 || got[0].Attempt != 1 || got[0].Error != "make folder: no space" ||
		got[1].Status != "aborted" || got[1].Error != "checkpoint 1 timed out after 10m0s" || !got[1].Completed.Equal(t0.Add(time.Minute)) ||
		got[2].Status != "completed" || *got[2].DurationMS != 30 || *got[2].SizeBytes != 4096 || *got[2].AlignmentMS != 7 {
		t.Fatalf("history %+v", got)
	}
	for id := 2; id < 2+checkpointHistory; id++ {
		d.listen("j", runtime.Event{Kind: runtime.EventCheckpointTriggered, Attempt: 1, Checkpoint: info(id)})
	}
	got = d.checkpoints("j")
	if len(got) != checkpointHistory || got[0].ID != checkpointHistory+1 || got[len(got)-1].ID != 2 {
		t.Fatalf("%d entries, newest %d, oldest %d; want %d, %d, 2", len(got), got[0].ID, got[len(got)-1].ID,
			checkpointHistory, checkpointHistory+1)
	}
	if other := d.checkpoints("other"); len(other) != 0 {
		t.Fatalf("another job's history: %+v", other)
	}
}

// TestDashboardSecurity: the pages and their assets pass the same checks
// as the API (Host, cross-origin), carry a strict content security policy
// and hold no token; beyond loopback they load without the token, which
// the API's reads, the dashboard's included, still need.
func TestDashboardSecurity(t *testing.T) {
	r, _ := testRunner(t)
	e := serveTest(t, r, "127.0.0.1:0", pipelines.HTTP{})
	paths := []string{"/assets/app.js", "/assets/style.css"}
	for p := range dashboardPages {
		paths = append(paths, p)
	}
	for _, p := range paths {
		req, _ := http.NewRequest("GET", e.base+p, nil)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") != dashboardCSP ||
			resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: %s, CSP %q", p, resp.Status, resp.Header.Get("Content-Security-Policy"))
		}
		if code, _ := send(t, e, "GET", p, "evil.example"); code != http.StatusForbidden {
			t.Errorf("GET %s with Host evil.example: %d, want 403", p, code)
		}
		if code, _ := send(t, e, "GET", p, "", "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
			t.Errorf("GET %s from another site: %d, want 403", p, code)
		}
	}
	for _, p := range []string{"/assets/", "/assets/nope.js", "/assets/../index.html", "/index.html", "/page.html", "/graph.html", "/assets/assets/app.js"} {
		if code, body := send(t, e, "GET", p, ""); code != http.StatusNotFound && code != http.StatusMovedPermanently {
			t.Errorf("GET %s: %d %.80q, want 404 (or a redirect of a path to clean)", p, code, body)
		}
	}

	r2, _ := testRunner(t)
	e2 := serveTest(t, r2, "0.0.0.0:0", pipelines.HTTP{})
	for _, p := range paths {
		code, body := send(t, e2, "GET", p, "")
		if code != http.StatusOK || strings.Contains(body, e2.token) {
			t.Errorf("GET %s beyond loopback without the token: %d (token in it: %v), want 200 without it", p, code, strings.Contains(body, e2.token))
		}
	}
	for _, p := range []string{"/api/v1/sources", "/api/v1/exporters", "/api/v1/history", "/api/v1/jobs/x/graph", "/api/v1/jobs/x/checkpoints/history"} {
		if code, _ := send(t, e2, "GET", p, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s beyond loopback without the token: %d, want 401", p, code)
		}
	}
	if code, _ := send(t, e2, "GET", "/api/v1/history", "", "Authorization", "Bearer "+e2.token); code != http.StatusOK {
		t.Errorf("GET /api/v1/history with the token: %d, want 200", code)
	}
}

// TestGraphOf: the graph's counts are the newest sample's and its rates
// those between the two newest samples; with one sample (or a task the
// older one missed) the rates are unknown, and without samples the counts
// are the current ones.
func TestGraphOf(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// Records in and out; the busy, backpressured and idle time grow as
	// the records, by 1 ms, 2 ms and 3 ms each.
	task := func(chain string, sub int, in, out int64) runtime.TaskStatus {
		ms := time.Duration(in) * time.Millisecond
		return runtime.TaskStatus{Chain: chain, Operators: []string{chain}, Subtask: sub, Parallelism: 2, Source: chain == "src",
			State: runtime.TaskRunning, RecordsIn: in, RecordsOut: out, BusyTime: ms, BackpressuredTime: 2 * ms, IdleTime: 3 * ms}
	}
	at := func(d time.Duration, tasks ...runtime.TaskStatus) *sample {
		s := &sample{Time: t0.Add(d), tasks: map[taskKey]runtime.TaskStatus{}}
		for _, ts := range tasks {
			s.tasks[taskKey{"j", ts.Chain, ts.Subtask}] = ts
		}
		return s
	}
	now := []runtime.TaskStatus{task("src", 0, 900, 900), task("src", 1, 900, 900), task("sink", 0, 1800, 0), task("sink", 1, 0, 0)}
	edges := []runtime.Edge{{From: "src", To: "sink", Partitioning: "hash"}}
	prev := at(0, task("src", 0, 100, 100), task("src", 1, 200, 200), task("sink", 0, 300, 0))
	last := at(2*time.Second, task("src", 0, 500, 500), task("src", 1, 600, 600), task("sink", 0, 1100, 0), task("sink", 1, 0, 0))

	g := graphOf("j", now, edges, prev, last)
	if len(g.Chains) != 2 || len(g.Edges) != 1 || g.Edges[0] != (edgeInfo{"src", "sink", "hash"}) || !g.SampledAt.Equal(last.Time) {
		t.Fatalf("graph %+v", g)
	}
	src, sink := g.Chains[0], g.Chains[1]
	if !src.Source || src.RecordsIn != 1100 || *src.RecordsInPerS != 400 || *src.Subtasks[1].RecordsOutPerS != 200 ||
		sink.RecordsIn != 1100 || *sink.Subtasks[0].RecordsInPerS != 400 || sink.Subtasks[1].RecordsInPerS != nil || *sink.RecordsInPerS != 400 {
		t.Fatalf("rates: src %+v, sink %+v", src, sink)
	}
	if src.BusyTotalMS != 1100 || src.IdleTotalMS != 3300 || *src.BusyMSPerS != 400 || *src.BackpressuredMSPerS != 800 ||
		*src.Subtasks[0].IdleMSPerS != 600 || sink.Subtasks[1].BusyMSPerS != nil {
		t.Fatalf("times: src %+v, sink %+v", src, sink)
	}
	// The rates are over the time between the reads of the job's status,
	// not between the samples' times (here 0.5 s more: a slow sample).
	prev.Jobs = map[string]jobSample{"j": {at: t0.Add(500 * time.Millisecond)}}
	last.Time = last.Time.Add(500 * time.Millisecond)
	last.Jobs = map[string]jobSample{"j": {at: t0.Add(2500 * time.Millisecond)}}
	if g := graphOf("j", now, edges, prev, last); *g.Chains[0].RecordsInPerS != 400 || *g.Chains[0].IdleMSPerS != 1200 ||
		!g.SampledAt.Equal(t0.Add(2500*time.Millisecond)) {
		t.Fatalf("rates over the status reads: %+v at %s", g.Chains[0], g.SampledAt)
	}
	g = graphOf("j", now, edges, nil, last) // one sample: counts, no rates
	if c := g.Chains[0]; c.RecordsIn != 1100 || c.RecordsInPerS != nil || c.BusyMSPerS != nil || c.BusyTotalMS != 1100 {
		t.Fatalf("one sample: %+v", c)
	}
	g = graphOf("j", now, edges, nil, nil) // none: the current counts
	if c := g.Chains[1]; c.RecordsIn != 1800 || c.RecordsInPerS != nil || len(c.Subtasks) != 2 || !g.SampledAt.IsZero() {
		t.Fatalf("no sample: %+v", c)
	}
}
