package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ebbflow/ebbflow/pipelines"
)

// chromiumEnv names a Chromium (or Chrome) binary for the browser tests;
// without it they look for chromium, chromium-browser, google-chrome and
// google-chrome-stable on the PATH.
const chromiumEnv = "EBBFLOW_CHROMIUM"

// screenshotsEnv names the folder the browser tests write their
// screenshots to (default: a new temporary folder, named in the log).
const screenshotsEnv = "EBBFLOW_SCREENSHOTS"

func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumEnv); p != "" {
		return p
	}
	names := []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Skipf("no Chromium binary found (looked for %s on the PATH): install it (Debian: apt-get install -y chromium) or set %s",
		strings.Join(names, ", "), chromiumEnv)
	return ""
}

// browser is a headless Chromium tab that records every console error and
// uncaught exception of the pages it shows.
type browser struct {
	t    *testing.T
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses root (CI containers)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b := &browser{t: t, ctx: ctx}
	// Console subscribes (and starts the browser) before any page loads.
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				b.mu.Lock()
				b.errs = append(b.errs, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cancelAlloc()
	})
	return b
}

// consoleErrors returns the errors and exceptions recorded so far.
func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// do runs actions with a timeout.
func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page into v.
func (b *browser) eval(expr string, v any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		b.t.Fatalf("evaluate %s: %v: %s", expr, err, raw)
	}
}

// waitUntil evaluates the JavaScript condition until it is true.
func (b *browser) waitUntil(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		b.eval("Boolean("+cond+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			b.eval(`document.body.innerText`, &body)
			b.t.Fatalf("timed out waiting for %s (%s); the page shows:\n%s", what, cond, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// open loads a page and waits until it rendered the API's answers twice
// (the first poll and one more: so it is live).
func (b *browser) open(url string) {
	b.t.Helper()
	b.do(chromedp.Navigate(url))
	b.waitUntil("the page's second render", `document.body.dataset.renders >= 2`)
}

// text returns the text of the element matching a CSS selector.
func (b *browser) text(sel string) string {
	b.t.Helper()
	var s *string
	b.eval(fmt.Sprintf(`(e => e ? e.textContent : null)(document.querySelector(%q))`, sel), &s)
	if s == nil {
		b.t.Fatalf("no element %s in the page", sel)
	}
	return *s
}

// number parses a number the dashboard shows ("1,234").
func number(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		t.Fatalf("the page shows %q, not a number", s)
	}
	return n
}

// screenshot writes the page as dir/name.png.
func (b *browser) screenshot(dir, name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// checkpointSlack is how far behind the API the checkpoint id a page
// shows may be: the checkpoints completed in one poll interval of the page
// (1 s, at the test's 200 ms interval), and one in flight.
const checkpointSlack = 1000/200 + 1

// TestDashboardInBrowser loads every page of the dashboard of a running
// quickstart in headless Chromium: no page logs a console error or throws,
// each shows the numbers of the JSON API (the counts exactly, as the
// generator is bounded; checkpoint ids within checkpointSlack of the API,
// and growing while the page is open), the graph draws an SVG node per
// chain and an edge per edge, and a screenshot of each page is written
// (to $EBBFLOW_SCREENSHOTS, else a temporary folder).
func TestDashboardInBrowser(t *testing.T) {
	b := newBrowser(t)
	shots := os.Getenv(screenshotsEnv)
	if shots == "" {
		var err error
		if shots, err = os.MkdirTemp("", "ebbflow-screenshots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots of the dashboard go to %s (set %s to choose)", shots, screenshotsEnv)
	c, _, base := dashboardRunner(t, "", dashboardCount)

	// Jobs.
	var jobs []jobStatus
	b.open(base + "/")
	getJSON(t, base+"/api/v1/jobs", &jobs)
	row := `#jobs tr[data-job="quickstart"] `
	var read int64
	for _, ts := range jobs[0].Tasks {
		if ts.Source {
			read += ts.RecordsIn
		}
	}
	if got := number(t, b.text(row+`[data-field="records_read"]`)); got != read || read != dashboardCount {
		t.Errorf("jobs page: records read %d, the API %d (of %d)", got, read, dashboardCount)
	}
	for field, want := range map[string]string{"state": jobs[0].State, "phase": jobs[0].Phase, "restarts": strconv.Itoa(jobs[0].Restarts),
		"last_failure": "none"} {
		if got := b.text(row + fmt.Sprintf(`[data-field=%q]`, field)); got != want {
			t.Errorf("jobs page: %s %q, the API %q", field, got, want)
		}
	}
	shown := checkpointShown(t, b, base, row+`[data-field="last_checkpoint"]`)
	b.waitUntil("a newer checkpoint on the jobs page (live updates)",
		fmt.Sprintf(`Number(document.querySelector(%q).textContent) > %d`, row+`[data-field="last_checkpoint"]`, shown))
	var charts int
	b.eval(`document.querySelectorAll("svg.chart polyline").length`, &charts)
	if charts < 2 {
		t.Errorf("jobs page: %d plotted lines, want throughput and checkpoint duration", charts)
	}
	b.screenshot(shots, "jobs")

	// Graph.
	b.open(base + "/graph?job=quickstart")
	var g graphInfo
	getJSON(t, base+"/api/v1/jobs/quickstart/graph", &g)
	var drawn struct{ Chains, Edges []string }
	b.eval(`({chains: [...document.querySelectorAll("svg#graph g.chain")].map(e => e.dataset.chain),
		edges: [...document.querySelectorAll("svg#graph g.edge")].map(e => e.dataset.from + " => " + e.dataset.to)})`, &drawn)
	var chains, edges []string
	for _, ch := range g.Chains {
		chains = append(chains, ch.Name)
	}
	for _, e := range g.Edges {
		edges = append(edges, e.From+" => "+e.To)
	}
	if fmt.Sprint(drawn.Chains) != fmt.Sprint(chains) || fmt.Sprint(drawn.Edges) != fmt.Sprint(edges) {
		t.Errorf("graph page draws chains %q and edges %q; the API has %q and %q", drawn.Chains, drawn.Edges, chains, edges)
	}
	for _, ch := range g.Chains {
		for _, s := range ch.Subtasks {
			sel := fmt.Sprintf(`#subtasks tr[data-chain=%q][data-subtask="%d"] `, ch.Name, s.Subtask)
			if in, out := number(t, b.text(sel+`[data-field="records_in"]`)), number(t, b.text(sel+`[data-field="records_out"]`)); in != s.RecordsIn ||
				out != s.RecordsOut {
				t.Errorf("graph page: %s subtask %d records in %d, out %d; the API %d, %d", ch.Name, s.Subtask, in, out, s.RecordsIn, s.RecordsOut)
			}
		}
		// The rates move each second: the page shows some, as the API has.
		if times := b.text(fmt.Sprintf(`g.chain[data-chain=%q] [data-field="times"]`, ch.Name)); ch.BusyMSPerS == nil ||
			!regexp.MustCompile(`^busy \d+% · backpressured \d+% · idle \d+%$`).MatchString(times) {
			t.Errorf("graph page: chain %s shows %q; the API's busy time per second: %v", ch.Name, times, ch.BusyMSPerS)
		}
	}
	b.screenshot(shots, "graph")

	// Checkpoints.
	b.open(base + "/checkpoints")
	checkpointShown(t, b, base, `.summary[data-job="quickstart"] [data-field="last_checkpoint"]`)
	var hist struct{ Checkpoints []checkpointEvent }
	getJSON(t, base+"/api/v1/jobs/quickstart/checkpoints/history", &hist)
	var rows []struct{ ID, Status string }
	b.eval(`[...document.querySelectorAll('table.checkpoints[data-job="quickstart"] tbody tr')].map(r =>
		({id: r.dataset.id, status: r.querySelector('[data-field="status"]').textContent}))`, &rows)
	byID := map[string]string{}
	for _, e := range hist.Checkpoints {
		byID[strconv.FormatUint(e.ID, 10)] = e.Status
	}
	if len(rows) == 0 || len(rows) > checkpointHistory {
		t.Fatalf("checkpoints page: %d rows", len(rows))
	}
	for _, r := range rows {
		// A checkpoint in progress when the page polled may have completed since.
		if want, ok := byID[r.ID]; ok && r.Status != want && !(r.Status == "in_progress" && want == "completed") {
			t.Errorf("checkpoints page: checkpoint %s %q, the API %q", r.ID, r.Status, want)
		}
	}
	b.screenshot(shots, "checkpoints")

	// Tables.
	b.open(base + "/tables")
	var tables []tableInfo
	getJSON(t, base+"/api/v1/tables", &tables)
	sum := `.summary[data-table="revenue"] `
	if rows, buckets := number(t, b.text(sum+`[data-field="rows"]`)), number(t, b.text(sum+`[data-field="buckets"]`)); rows != int64(tables[0].Rows) ||
		buckets != int64(tables[0].Buckets) {
		t.Errorf("tables page: rows %d, buckets %d; the API %d, %d", rows, buckets, tables[0].Rows, tables[0].Buckets)
	}
	for _, w := range tables[0].Writers {
		if got := number(t, b.text(fmt.Sprintf(`tr[data-writer=%q] [data-field="epoch"]`, w.Writer))); got != int64(w.Epoch) {
			t.Errorf("tables page: writer %s epoch %d, the API %d", w.Writer, got, w.Epoch)
		}
	}
	// Its lineage: the graph of GET /api/v1/topology, and the version it
	// had (versions go on with the checkpoints).
	b.waitUntil("the lineage section", `document.querySelector('#lineage tr[data-table="revenue"]') !== null`)
	var lineage struct {
		Edges   []string
		Version string
	}
	b.eval(`({edges: [...document.querySelectorAll("#lineage-edges li")].map(e => e.dataset.from + " => " + e.dataset.to),
		version: document.querySelector('#lineage tr[data-table="revenue"] [data-field="version"]').textContent})`, &lineage)
	var top topology
	getJSON(t, base+"/api/v1/topology", &top)
	var apiEdges []string
	for _, e := range top.Edges {
		apiEdges = append(apiEdges, e.From+" => "+e.To)
	}
	wantEdges := []string{"job:quickstart => table:revenue", "source:orders => job:quickstart", "table:revenue => changelog:revenue-changelog"}
	if fmt.Sprint(lineage.Edges) != fmt.Sprint(apiEdges) || fmt.Sprint(apiEdges) != fmt.Sprint(wantEdges) {
		t.Errorf("tables page: lineage %q; the API %q, want %q", lineage.Edges, apiEdges, wantEdges)
	}
	if v := number(t, lineage.Version); len(top.Tables) != 1 || top.Tables[0].Version == nil || v < 1 || uint64(v) > top.Tables[0].Version.Version {
		t.Errorf("tables page: revenue at version %d; the API then: %+v", v, top.Tables)
	}
	b.screenshot(shots, "tables")

	// Kafka.
	b.open(base + "/kafka")
	var sources struct{ Partitions []sourcePartition }
	var xs []exporterInfo
	getJSON(t, base+"/api/v1/sources", &sources)
	getJSON(t, base+"/api/v1/exporters", &xs)
	for _, p := range sources.Partitions {
		if got := number(t, b.text(fmt.Sprintf(`#partitions tr[data-topic=%q][data-partition="%d"] [data-field="lag"]`, p.Topic, p.Partition))); got != p.Lag {
			t.Errorf("kafka page: %s/%d lag %d, the API %d", p.Topic, p.Partition, got, p.Lag)
		}
	}
	// The exporter's lag moves with every checkpoint, between the page's
	// poll and the test's: they must agree at some moment (both caught up,
	// as a rule), within 10 s.
	x := `#exporters tr[data-table="revenue"] `
	for deadline := time.Now().Add(10 * time.Second); ; {
		mode, lag := b.text(x+`[data-field="mode"]`), number(t, b.text(x+`[data-field="lag"]`))
		if mode == xs[0].Mode && lag == int64(xs[0].LagEntries) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("kafka page: exporter mode %q, lag %d; the API %q, %d", mode, lag, xs[0].Mode, xs[0].LagEntries)
			break
		}
		time.Sleep(100 * time.Millisecond)
		getJSON(t, base+"/api/v1/exporters", &xs)
	}
	b.screenshot(shots, "kafka")

	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors and exceptions:\n%s", strings.Join(errs, "\n"))
	}
	stopGracefully(t, c)
}

// checkpointShown returns the checkpoint id the element sel shows, after
// checking that it is between the API's, read before and after it, less
// checkpointSlack.
func checkpointShown(t *testing.T, b *browser, base, sel string) int64 {
	t.Helper()
	var before, after []jobStatus
	getJSON(t, base+"/api/v1/jobs", &before)
	shown := number(t, b.text(sel))
	getJSON(t, base+"/api/v1/jobs", &after)
	if lo, hi := int64(*before[0].LastCheckpoint)-checkpointSlack, int64(*after[0].LastCheckpoint); shown < lo || shown > hi {
		t.Errorf("%s shows checkpoint %d; the API had %d before and %d after (slack %d)", sel, shown, lo+checkpointSlack, hi, checkpointSlack)
	}
	return shown
}

// TestDashboardTokenInBrowser: beyond loopback the pages load without the
// token, show no data and ask for it; given it (typed into the page), they
// render, keep it in the tab's sessionStorage only and never put it into
// the page. The browser's only console errors are the API's 401s before.
func TestDashboardTokenInBrowser(t *testing.T) {
	b := newBrowser(t)
	r, _ := testRunner(t)
	e := serveTest(t, r, "0.0.0.0:0", pipelines.HTTP{})
	_, port, _ := net.SplitHostPort(e.addr)
	b.do(chromedp.Navigate("http://127.0.0.1:" + port + "/"))
	b.waitUntil("the token form", `!document.getElementById("token").hidden`)
	var rendered bool
	b.eval(`document.body.dataset.ready === "1"`, &rendered)
	if rendered {
		t.Fatal("the page rendered the API's data without the token")
	}
	b.do(chromedp.SendKeys(chromedp.ID("token-input"), e.token), chromedp.Click(chromedp.CSS(`#token button[type="submit"]`)))
	b.waitUntil("the page's second render with the token", `document.body.dataset.renders >= 2`)
	var state struct {
		Stored string
		Form   bool
		Jobs   bool
		HTML   string
	}
	b.eval(`({stored: sessionStorage.getItem("ebbflow-runner-token"), form: document.getElementById("token").hidden,
		jobs: !!document.getElementById("jobs"), html: document.documentElement.outerHTML})`, &state)
	if state.Stored != e.token || !state.Form || !state.Jobs || strings.Contains(state.HTML, e.token) {
		t.Fatalf("after the token: stored %v, form hidden %v, jobs table %v, token in the page %v",
			state.Stored == e.token, state.Form, state.Jobs, strings.Contains(state.HTML, e.token))
	}
	for _, msg := range b.consoleErrors() {
		if !strings.Contains(msg, "401 (Unauthorized)") {
			t.Errorf("console: %s", msg)
		}
	}
}
