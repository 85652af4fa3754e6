package main

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const grafanaDashboard = "../../docs/grafana-ebbflow.json"

// grafanaQuery is a PromQL query of the Grafana dashboard and where it is.
type grafanaQuery struct {
	where, expr string
}

// grafanaQueries returns every query of the dashboard: the panels'
// targets (rows' nested panels included) and the template variables'.
func grafanaQueries(t *testing.T, file string) []grafanaQuery {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels     []grafanaPanel
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var out []grafanaQuery
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				out = append(out, grafanaQuery{"panel " + p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
		}
		out = append(out, grafanaQuery{"variable " + v.Name, q.Query})
	}
	return out
}

type grafanaPanel struct {
	Type, Title string
	Targets     []struct{ Expr string }
	Panels      []grafanaPanel
}

var (
	// The parts of PromQL that hold no metric name: strings, label
	// matchers, ranges, the label lists of by, without, on, ignoring and
	// group_left/right, and numbers and durations (0.99, 5m).
	promNoise = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\b\d[\w.]*`)
	promIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	// label_values(metric, label), a Grafana variable query.
	labelValues  = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_]\w*\s*\)$`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan"}
)

// promMetrics returns the metric names a PromQL expression reads: the
// identifiers that are neither functions (followed by a parenthesis),
// labels, keywords nor numbers.
func promMetrics(expr string) []string {
	if m := labelValues.FindStringSubmatch(strings.TrimSpace(expr)); m != nil {
		return []string{m[1]}
	}
	var out []string
	for _, id := range promIdent.FindAllString(promNoise.ReplaceAllString(expr, " "), -1) {
		id = strings.TrimSpace(id)
		if strings.HasSuffix(id, "(") || slices.Contains(promKeywords, strings.ToLower(id)) {
			continue
		}
		out = append(out, id)
	}
	return out
}

// TestPromMetrics pins the extraction of metric names from PromQL that
// TestGrafanaDashboardMetrics relies on.
func TestPromMetrics(t *testing.T) {
	for expr, want := range map[string]string{
		`histogram_quantile(0.99, sum by (job, le) (rate(ebbflow_checkpoint_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))`: "ebbflow_checkpoint_duration_seconds_bucket",
		`time() - ebbflow_last_checkpoint_completed_timestamp_seconds{job=~"$job"}`:                                                    "ebbflow_last_checkpoint_completed_timestamp_seconds",
		`sum without (instance) (a_total) / on (job) group_left (x) b > bool 0`:                                                        "a_total b",
		`label_values(ebbflow_job_ready, job)`:                                                                                         "ebbflow_job_ready",
		`up{job="a{b}"} offset 5m or vector(1)`:                                                                                        "up",
	} {
		if got := strings.Join(promMetrics(expr), " "); got != want {
			t.Errorf("promMetrics(%s) = %q, want %q", expr, got, want)
		}
	}
}

// exportedMetrics scrapes a runner's /metrics and returns the names it
// exports: every family, and the _bucket, _sum and _count series of the
// histograms and summaries.
func exportedMetrics(t *testing.T, base string) map[string]bool {
	t.Helper()
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	names := map[string]bool{}
	for line := range strings.Lines(body) {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		names[f[2]] = true
		if f[3] == "histogram" || f[3] == "summary" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f[2]+s] = true
			}
		}
	}
	return names
}

// TestGrafanaDashboardMetrics: every query of docs/grafana-ebbflow.json
// reads at least one metric, and only metrics a running runner (the
// quickstart, with its Kafka source and changelog) exports on /metrics.
func TestGrafanaDashboardMetrics(t *testing.T) {
	queries := grafanaQueries(t, grafanaDashboard)
	if len(queries) < 20 {
		t.Fatalf("%d queries in %s", len(queries), grafanaDashboard)
	}
	c, _, base := dashboardRunner(t, "", dashboardCount)
	exported := exportedMetrics(t, base)
	for _, q := range queries {
		names := promMetrics(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: query %q names no metric", q.where, q.expr)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s: query %q reads %s, which the runner does not export", q.where, q.expr, n)
			}
		}
	}
	stopGracefully(t, c)
}
