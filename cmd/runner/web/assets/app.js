// The ebbflow runner's dashboard. Every page polls the runner's JSON API
// (docs/RUNNER.md, "HTTP") once a second and renders what it returns; the
// pages hold no data of their own. Text goes into the page with
// textContent only, never as HTML.
"use strict";

(function () {
  const POLL_MS = 1000;
  const page = document.body.dataset.page;
  const app = document.getElementById("app");
  const errorBox = document.getElementById("error");
  const updated = document.getElementById("updated");
  const tokenForm = document.getElementById("token");
  const TOKEN_KEY = "ebbflow-runner-token";
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let renders = 0;

  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.nav === page) a.classList.add("current");
  }

  // A runner beyond loopback wants its token for the API's reads; the
  // user gives it here and it stays in this tab's sessionStorage.
  tokenForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = document.getElementById("token-input").value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    tokenForm.hidden = true;
    poll();
  });

  class NeedToken extends Error {}

  async function api(path) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    const resp = await fetch(path, { headers, cache: "no-store", credentials: "omit" });
    if (resp.status === 401) throw new NeedToken("the API needs the runner's token");
    if (!resp.ok) {
      let msg = resp.status + " " + resp.statusText;
      try {
        const body = await resp.json();
        if (body && body.error) msg = body.error;
      } catch (_) { /* not JSON */ }
      throw new Error(path + ": " + msg);
    }
    return resp.json();
  }

  // ---- DOM helpers ------------------------------------------------------

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG, tag);
    setAttrs(e, attrs);
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function setAttrs(e, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined && v !== false && v !== "") e.setAttribute(k, String(v));
    }
  }

  function table(headers, rows, attrs) {
    return el("table", attrs,
      el("thead", null, el("tr", null, ...headers.map((h) => el("th", null, h)))),
      el("tbody", null, ...rows));
  }

  // cell is a table cell whose data-field names what it shows, for tests
  // and scripts reading the page.
  function cell(field, value, cls) {
    return el("td", { "data-field": field, class: cls }, value);
  }

  function section(title, ...children) {
    return el("section", null, el("h2", null, title), ...children);
  }

  // ---- formatting -------------------------------------------------------

  const NA = "n/a";
  function int(n) {
    return n === null || n === undefined ? NA : Math.round(n).toLocaleString("en-US");
  }
  function num(n, digits) {
    if (n === null || n === undefined) return NA;
    return n.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
  }
  function ms(n) { return n === null || n === undefined ? NA : num(n, 1) + " ms"; }
  function perS(n) { return n === null || n === undefined ? NA : num(n, 0) + " ms/s"; }
  function bytes(n) {
    if (n === null || n === undefined) return NA;
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return num(n, i ? 1 : 0) + " " + units[i];
  }
  function duration(seconds) {
    if (seconds === null || seconds === undefined) return NA;
    seconds = Math.floor(seconds);
    const d = Math.floor(seconds / 86400), h = Math.floor(seconds / 3600) % 24, m = Math.floor(seconds / 60) % 60, s = seconds % 60;
    if (d) return d + "d " + h + "h";
    if (h) return h + "h " + m + "m";
    if (m) return m + "m " + s + "s";
    return s + "s";
  }
  function time(t) {
    if (!t) return NA;
    const d = new Date(t);
    return isNaN(d) ? NA : d.toLocaleTimeString("en-GB");
  }
  function ago(t) {
    if (!t) return NA;
    const s = (Date.now() - new Date(t).getTime()) / 1000;
    return s < 1 ? "just now" : duration(s) + " ago";
  }
  function sum(xs, f) { return xs.reduce((a, x) => a + (f(x) || 0), 0); }
  function jobFromURL(jobs) {
    const want = new URLSearchParams(location.search).get("job");
    return jobs.find((j) => j.name === want) || jobs[0];
  }

  // ---- plots --------------------------------------------------------------

  const COLORS = ["#2f6fdf", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285"];

  // lineChart draws series [{name, points: [[ms since epoch, value]]}] as
  // an SVG line chart over the last 5 minutes, or since the oldest point
  // (at least a minute).
  function lineChart(title, series, unit) {
    const W = 420, H = 140, L = 52, R = 8, T = 22, B = 20;
    const now = Date.now();
    let oldest = now;
    for (const s of series) for (const [t] of s.points) if (t < oldest) oldest = t;
    const span = Math.min(5 * 60 * 1000, Math.max(60 * 1000, now - oldest));
    let max = 0;
    for (const s of series) for (const [, v] of s.points) if (v > max) max = v;
    max = max > 0 ? max * 1.1 : 1;
    const x = (t) => L + ((t - (now - span)) / span) * (W - L - R);
    const y = (v) => T + (1 - v / max) * (H - T - B);
    const chart = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "data-chart": title });
    chart.append(svg("text", { x: 4, y: 14, class: "chart-title" }, title));
    chart.append(svg("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "axis" }));
    chart.append(svg("line", { x1: L, y1: T, x2: L, y2: y(0), class: "axis" }));
    chart.append(svg("text", { x: L - 4, y: T + 4, class: "tick", "text-anchor": "end" }, num(max, max < 10 ? 2 : 0)));
    chart.append(svg("text", { x: L - 4, y: y(0), class: "tick", "text-anchor": "end" }, "0"));
    chart.append(svg("text", { x: L, y: H - 4, class: "tick" }, "−" + (span >= 60 * 1000 ? Math.round(span / 60000) + " min" : duration(span / 1000))));
    chart.append(svg("text", { x: W - R, y: H - 4, class: "tick", "text-anchor": "end" }, "now" + (unit ? " · " + unit : "")));
    series.forEach((s, i) => {
      const pts = s.points.filter(([t]) => t >= now - span);
      if (pts.length === 0) return;
      const color = COLORS[i % COLORS.length];
      if (pts.length === 1) {
        chart.append(svg("circle", { cx: x(pts[0][0]), cy: y(pts[0][1]), r: 2.5, fill: color }));
      } else {
        chart.append(svg("polyline", { points: pts.map(([t, v]) => x(t).toFixed(1) + "," + y(v).toFixed(1)).join(" "),
          fill: "none", stroke: color, "stroke-width": 1.5 }));
      }
      chart.append(svg("text", { x: W - R, y: T + 12 * i + 4, class: "legend", fill: color, "text-anchor": "end" }, s.name));
    });
    return chart;
  }

  function historySeries(history, pick) {
    const byName = new Map();
    for (const s of history.samples) {
      const t = new Date(s.time).getTime();
      for (const [name, v] of pick(s)) {
        if (v === null || v === undefined) continue;
        if (!byName.has(name)) byName.set(name, []);
        byName.get(name).push([t, v]);
      }
    }
    return [...byName].map(([name, points]) => ({ name, points }));
  }

  // ---- pages ------------------------------------------------------------

  async function jobsPage() {
    const [jobs, history] = await Promise.all([api("/api/v1/jobs"), api("/api/v1/history")]);
    const rows = jobs.map((j) => {
      const read = sum(j.tasks || [], (t) => (t.source ? t.records_in : 0));
      const last = history.samples.length ? history.samples[history.samples.length - 1].jobs[j.name] : null;
      return el("tr", { "data-job": j.name },
        el("td", null, el("a", { href: "/graph?job=" + encodeURIComponent(j.name) }, j.name)),
        cell("phase", j.phase, "state-" + j.phase),
        cell("state", j.state, "state-" + j.state),
        cell("health", j.healthy ? "ok" : j.health, j.healthy ? "" : "bad"),
        cell("uptime", duration(j.uptime_seconds)),
        cell("attempt", int(j.attempt)),
        cell("restarts", int(j.restarts), j.restarts ? "warn" : ""),
        cell("records_read", int(read)),
        cell("records_read_per_s", last ? num(last.records_read_per_s, 0) : NA),
        cell("checkpoints_completed", int(j.checkpoints_completed)),
        cell("last_checkpoint", j.last_checkpoint === undefined ? NA : String(j.last_checkpoint)),
        cell("last_failure", j.last_failure ? time(j.last_failure.time) + ": " + j.last_failure.error : (j.error || "none"),
          j.last_failure || j.error ? "bad wrap" : "wrap"));
    });
    const throughput = historySeries(history, (s) => Object.entries(s.jobs).map(([n, j]) => [n, j.records_read_per_s]));
    const cpDuration = historySeries(history, (s) => Object.entries(s.jobs).map(([n, j]) => [n, j.last_checkpoint_duration_ms]));
    return [
      section("Jobs", table(["job", "phase", "state", "health", "uptime", "attempt", "restarts", "records read", "records/s",
        "checkpoints", "last checkpoint", "last failure"], rows, { id: "jobs" })),
      section("Last minutes", el("div", { class: "charts" },
        lineChart("records read per second", throughput, "records/s"),
        lineChart("last checkpoint duration", cpDuration, "ms"))),
    ];
  }

  async function graphPage() {
    const jobs = await api("/api/v1/jobs");
    if (!jobs.length) return [el("p", null, "No jobs.")];
    const job = jobFromURL(jobs);
    const g = await api("/api/v1/jobs/" + encodeURIComponent(job.name) + "/graph");
    const picker = el("p", null, "Job: ", ...jobs.map((j) =>
      el("a", { href: "/graph?job=" + encodeURIComponent(j.name), class: j.name === job.name ? "current" : "" }, j.name + " ")));
    const timesKnown = g.chains.some((c) => c.busy_ms_per_s !== null);
    const subRows = [];
    for (const c of g.chains) {
      for (const s of c.subtasks) {
        subRows.push(el("tr", { "data-chain": c.name, "data-subtask": s.subtask },
          el("td", null, c.name), cell("subtask", s.subtask), cell("state", s.state, "state-" + s.state),
          cell("records_in", int(s.records_in)), cell("records_out", int(s.records_out)),
          cell("records_in_per_s", num(s.records_in_per_s, 0)), cell("records_out_per_s", num(s.records_out_per_s, 0)),
          cell("busy", perS(s.busy_ms_per_s)), cell("backpressured", perS(s.backpressured_ms_per_s)),
          cell("idle", perS(s.idle_ms_per_s))));
      }
    }
    return [
      picker,
      section("Job graph of " + job.name, drawGraph(g),
        el("p", { class: "muted", id: "times-note" }, timesKnown
          ? "Busy, backpressured and idle: the share of the last second the chain's subtasks spent processing, waiting for room downstream, and waiting for input (on average over its subtasks). A busy chain behind backpressured ones is the bottleneck."
          : "Busy, backpressured and idle time: n/a until the runner has sampled the job twice (a second).")),
      section("Subtasks", table(["chain", "subtask", "state", "records in", "records out", "in/s", "out/s", "busy", "backpressured", "idle"],
        subRows, { id: "subtasks" })),
    ];
  }

  // drawGraph lays the chains out in columns by their distance from the
  // sources and draws the edges between them.
  function drawGraph(g) {
    const depth = new Map(g.chains.map((c) => [c.name, 0]));
    for (let i = 0; i < g.chains.length; i++) {
      for (const e of g.edges) depth.set(e.to, Math.max(depth.get(e.to) || 0, (depth.get(e.from) || 0) + 1));
    }
    const cols = [];
    for (const c of g.chains) {
      const d = depth.get(c.name);
      (cols[d] = cols[d] || []).push(c);
    }
    // About 7.2 px a character of the bold 11 px chain names.
    const BW = Math.max(290, ...g.chains.map((c) => 20 + 7.2 * c.operators.join(" → ").length)), BH = 100, GX = 80, GY = 24, PAD = 12;
    const pos = new Map();
    cols.forEach((col, d) => col.forEach((c, i) => pos.set(c.name, { x: PAD + d * (BW + GX), y: PAD + i * (BH + GY) })));
    const width = PAD * 2 + cols.length * BW + Math.max(0, cols.length - 1) * GX;
    const height = PAD * 2 + Math.max(1, ...cols.map((c) => c.length)) * (BH + GY) - GY;
    const root = svg("svg", { id: "graph", class: "graph", viewBox: `0 0 ${width} ${height}`, width, height, role: "img" });
    root.append(svg("defs", null, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7,
      markerHeight: 7, orient: "auto-start-reverse" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }))));
    for (const e of g.edges) {
      const a = pos.get(e.from), b = pos.get(e.to);
      if (!a || !b) continue;
      const x1 = a.x + BW, y1 = a.y + BH / 2, x2 = b.x, y2 = b.y + BH / 2, mx = (x1 + x2) / 2;
      root.append(svg("g", { class: "edge", "data-from": e.from, "data-to": e.to },
        svg("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, "marker-end": "url(#arrow)" }),
        svg("text", { x: mx, y: (y1 + y2) / 2 - 4, "text-anchor": "middle", class: "edge-label" }, e.partitioning)));
    }
    for (const c of g.chains) {
      const p = pos.get(c.name);
      const bp = c.backpressured_ms_per_s, busy = c.busy_ms_per_s;
      // The share of the last second the chain's subtasks were
      // backpressured (per subtask on average) colours the box.
      let level = "";
      if (bp !== null && bp !== undefined) level = bp / c.parallelism > 500 ? " hot" : bp / c.parallelism > 100 ? " warm" : "";
      const share = (v) => num(v / c.parallelism / 10, 0) + "%";
      const times = busy === null || busy === undefined ? "busy n/a · backpressured n/a · idle n/a"
        : "busy " + share(busy) + " · backpressured " + share(bp) + " · idle " + share(c.idle_ms_per_s);
      root.append(svg("g", { class: "chain" + level, "data-chain": c.name, transform: `translate(${p.x},${p.y})` },
        svg("rect", { width: BW, height: BH, rx: 6 }),
        svg("text", { x: 10, y: 18, class: "chain-name" }, c.operators.join(" → ")),
        svg("text", { x: 10, y: 36 }, (c.source ? "source · " : "") + "parallelism " + c.parallelism),
        svg("text", { x: 10, y: 54, "data-field": "rates" }, "in " + num(c.records_in_per_s, 0) + "/s · out " + num(c.records_out_per_s, 0) + "/s"),
        svg("text", { x: 10, y: 72, "data-field": "records_in" }, "records in " + int(c.records_in)),
        svg("text", { x: 10, y: 88, class: "muted", "data-field": "times" }, times)));
    }
    return el("div", { class: "graph-wrap" }, root);
  }

  const CHECKPOINT_ROWS = 20;

  async function checkpointsPage() {
    const jobs = await api("/api/v1/jobs");
    const out = [];
    for (const j of jobs) {
      const name = encodeURIComponent(j.name);
      const [hist, retained] = await Promise.all([api("/api/v1/jobs/" + name + "/checkpoints/history"),
        api("/api/v1/jobs/" + name + "/checkpoints").catch(() => [])]);
      const rows = hist.checkpoints.slice(0, CHECKPOINT_ROWS).map((c) => el("tr", { "data-id": c.id, class: "cp-" + c.status },
        cell("id", String(c.id)), cell("status", c.status + (c.final ? " (final)" : ""), "state-" + c.status),
        cell("attempt", int(c.attempt)), cell("triggered", time(c.triggered)), cell("duration", ms(c.duration_ms)),
        cell("size", bytes(c.size_bytes)), cell("alignment", ms(c.alignment_ms)), cell("error", c.error || "", "bad wrap")));
      const done = hist.checkpoints.filter((c) => c.status === "completed");
      const points = done.map((c) => [new Date(c.completed).getTime(), c.duration_ms]).reverse();
      const inFlight = j.checkpoint_in_flight ? String(j.checkpoint_in_flight.id) : "none";
      const waiting = (j.checkpoint_in_flight && j.checkpoint_in_flight.waiting) || [];
      out.push(section("Checkpoints of " + j.name,
        el("p", { class: "summary", "data-job": j.name },
          "last completed ", el("strong", { "data-field": "last_checkpoint" }, j.last_checkpoint === undefined ? NA : String(j.last_checkpoint)),
          " · in flight ", el("span", { "data-field": "in_flight" }, inFlight),
          waiting.length ? el("span", { "data-field": "waiting" }, " (waiting for " + waiting.join(", ") + ")") : null,
          " · completed in this run ", el("span", { "data-field": "checkpoints_completed" }, int(j.checkpoints_completed)),
          " · aborted (of the last " + hist.capacity + ") ", el("span", { "data-field": "aborted" },
            int(hist.checkpoints.filter((c) => c.status === "aborted").length)),
          " · retained on disk ", el("span", { "data-field": "retained" }, retained.filter((c) => c.completed).map((c) => c.id).join(", ") || "none")),
        el("div", { class: "charts" }, lineChart("checkpoint duration", [{ name: j.name, points }], "ms")),
        table(["id", "status", "attempt", "triggered", "duration", "size", "alignment", "failure"], rows,
          { class: "checkpoints", "data-job": j.name }),
        hist.checkpoints.length > CHECKPOINT_ROWS ? el("p", { class: "muted" }, "The newest " + CHECKPOINT_ROWS + " of " +
          hist.checkpoints.length + "; all of them in /api/v1/jobs/" + j.name + "/checkpoints/history.") : null));
    }
    return out.length ? out : [el("p", null, "No jobs.")];
  }

  // lineageSection draws GET /api/v1/topology: per table its newest
  // version, upstream versions and freshness, its version in the newest
  // consistent version of its part of the topology and that set's
  // freshness, then the graph's edges.
  function lineageSection(top) {
    const rows = top.tables.map((t) => el("tr", { "data-table": t.table },
      cell("table", t.table),
      cell("version", t.version ? String(t.version.version) : NA),
      cell("writers", t.version ? t.version.writers.map((w) => w.job + "@" + w.checkpoint).join(", ") : NA),
      cell("upstream", t.upstream.map((u) => u.table + "@" + u.version).join(", ") || "none"),
      cell("event_time", t.event_time || NA),
      cell("freshness", t.freshness_seconds === null ? NA : num(t.freshness_seconds, 1) + " s"),
      cell("consistent_version", t.consistent_version === null ? NA : String(t.consistent_version)),
      cell("consistent_freshness", t.consistent_freshness_seconds === null ? NA : num(t.consistent_freshness_seconds, 1) + " s")));
    const edges = top.edges.map((e) => el("li", { "data-from": e.from, "data-to": e.to }, e.from + " → " + e.to));
    return section("Lineage and freshness",
      rows.length ? table(["table", "newest version", "writers", "upstream versions", "event time covered", "freshness",
        "consistent version", "consistent freshness"], rows,
        { id: "lineage" }) : el("p", { class: "muted" }, "No tables."),
      el("ul", { id: "lineage-edges" }, ...edges),
      el("p", { class: "muted" }, top.note));
  }

  async function tablesPage() {
    const [tables, top] = await Promise.all([api("/api/v1/tables"),
      api("/api/v1/topology").catch((err) => (err instanceof NeedToken ? Promise.reject(err) : { error: err.message }))]);
    const lineage = top.error ? section("Lineage and freshness", el("p", { class: "bad" }, top.error)) : lineageSection(top);
    if (!tables.length) return [el("p", null, "No tables."), lineage];
    return [...tables.map((t) => {
      const writers = (t.writers || []).map((w) => el("tr", { "data-writer": w.writer },
        cell("writer", w.writer), cell("job", w.job), cell("columns", (w.columns || []).join(", ") || "all"),
        cell("epoch", int(w.epoch)), cell("committed", w.committed ? String(w.checkpoint) : "none"),
        cell("undo", w.last_undo ? int(w.last_undo.entries_scanned) + " entries, " + int(w.last_undo.keys_restored) + " keys, " +
          ms(w.last_undo.duration_ms) : "none in this run")));
      const logRows = (t.log || []).map((b) => el("tr", { "data-bucket": b.bucket },
        cell("bucket", String(b.bucket)), cell("start", int(b.start)), cell("end", int(b.end)), cell("entries", int(b.entries)),
        cell("retain_from", t.retain_from ? int(t.retain_from[b.bucket]) : NA)));
      return section("Table " + t.name,
        el("p", { class: "summary", "data-table": t.name },
          "rows ", el("strong", { "data-field": "rows" }, int(t.rows)),
          " · buckets ", el("span", { "data-field": "buckets" }, int(t.buckets)),
          " · log entries ", el("span", { "data-field": "log_entries" }, int(t.log_entries)),
          " · key ", t.key.map((c) => c.name).join(", "),
          " · columns ", t.columns.map((c) => c.name + " " + (c.func || c.agg || "")).join(", ")),
        t.error ? el("p", { class: "bad" }, t.error) : null,
        el("p", null, "Log holds: ", el("span", { "data-field": "holders" }, (t.holders || []).join(", ") || "none")),
        table(["writer", "job", "columns", "epoch", "committed checkpoint", "last undo"], writers, { class: "writers", "data-table": t.name }),
        el("details", null, el("summary", null, "Log per bucket"),
          table(["bucket", "start", "end", "entries", "retained from"], logRows, { class: "log", "data-table": t.name })));
    }), lineage];
  }

  async function kafkaPage() {
    const [kafka, sources, exporters, history] = await Promise.all([api("/api/v1/kafka"), api("/api/v1/sources"),
      api("/api/v1/exporters"), api("/api/v1/history")]);
    const parts = sources.partitions.map((p) => el("tr", { "data-topic": p.topic, "data-partition": p.partition },
      cell("job", p.job), cell("operator", p.operator), cell("subtask", String(p.subtask)), cell("topic", p.topic),
      cell("partition", String(p.partition)), cell("lag", int(p.lag_records), p.lag_records > 0 ? "warn" : "")));
    const xs = exporters.map((x) => el("tr", { "data-table": x.table },
      cell("table", x.table), cell("topic", x.topic), cell("cluster", x.cluster), cell("mode", x.mode), cell("format", x.format),
      cell("lag", int(x.lag_entries), x.lag_entries > 0 ? "warn" : ""),
      cell("last_commit", x.last_commit ? time(x.last_commit) + " (" + ago(x.last_commit) + ")" : "none yet")));
    const srcLag = historySeries(history, (s) => Object.entries(s.jobs).map(([n, j]) => [n, j.source_lag_records]));
    const expLag = historySeries(history, (s) => Object.entries(s.exporters || {}).map(([n, x]) => [n, x.lag_entries]));
    return [
      el("p", null, "Embedded broker: ", el("span", { "data-field": "embedded_brokers" },
        (kafka.embedded_brokers || []).join(", ") || "not started")),
      section("Source lag per partition", parts.length ? table(["job", "operator", "subtask", "topic", "partition", "lag (records)"],
        parts, { id: "partitions" }) : el("p", { class: "muted" }, "No Kafka source.")),
      section("Changelog exporters", xs.length ? table(["table", "topic", "cluster", "mode", "format", "lag (entries)", "last commit"],
        xs, { id: "exporters" }) : el("p", { class: "muted" }, "No changelog.")),
      section("Last minutes", el("div", { class: "charts" },
        lineChart("source lag", srcLag, "records"), lineChart("changelog export lag", expLag, "entries"))),
    ];
  }

  const pages = {
    jobs: jobsPage,
    graph: graphPage,
    checkpoints: checkpointsPage,
    tables: tablesPage,
    kafka: kafkaPage,
  };

  async function poll() {
    try {
      const nodes = await pages[page]();
      app.replaceChildren(...nodes);
      errorBox.hidden = true;
      renders++;
      document.body.dataset.renders = String(renders);
      document.body.dataset.ready = "1";
      updated.textContent = "updated " + new Date().toLocaleTimeString("en-GB");
    } catch (err) {
      if (err instanceof NeedToken) {
        tokenForm.hidden = false;
        errorBox.textContent = err.message + ": give it above.";
        errorBox.hidden = false;
        return; // polling resumes once a token is given
      }
      errorBox.textContent = "Cannot reach the runner: " + err.message;
      errorBox.hidden = false;
    }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();
