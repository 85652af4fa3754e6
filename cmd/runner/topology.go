package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// topologyRead says what a topology's versions are: per table its newest.
// The newest mutually consistent set of versions of the topology (issue
// 13, consistent reads) is not used yet.
const (
	topologyRead = "newest"
	topologyNote = "per table its newest version; freshness is now minus the source event time it covers " +
		"(not yet the newest consistent version of the topology)"
)

// topology is the lineage of the tables of one Kafka cluster: sources →
// jobs → tables → changelogs → jobs, from the job files a process has and
// from the versions topics of the cluster, which any process reads (a
// version names its writing jobs, their source topics and the upstream
// versions of changelogs they read).
type topology struct {
	Now    time.Time   `json:"now"`
	Read   string      `json:"read"`
	Note   string      `json:"note"`
	Nodes  []topoNode  `json:"nodes"`
	Edges  []topoEdge  `json:"edges"`
	Tables []topoTable `json:"tables"`
}

// topoNode is a node of the graph; its id is "<kind>:<name>".
type topoNode struct {
	ID   string `json:"id"`
	Kind string `json:"kind"` // source, job, table or changelog
	Name string `json:"name"`
}

type topoEdge struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// topoTable is a table of the graph and where its newest version stands.
type topoTable struct {
	ID        string `json:"id"` // its node
	Table     string `json:"table"`
	Changelog string `json:"changelog,omitempty"`
	// Version is its newest version (nil: none published yet, or no
	// changelog); Upstream are the upstream versions it includes.
	Version  *export.Version                `json:"version"`
	Upstream []changelogfmt.UpstreamVersion `json:"upstream"`
	// EventTime is the newest source event time Version covers and
	// FreshnessSeconds now minus it (nil: unknown).
	EventTime        *time.Time `json:"event_time"`
	FreshnessSeconds *float64   `json:"freshness_seconds"`
}

// graph builds a topology.
type graph struct {
	nodes  map[string]topoNode
	edges  map[topoEdge]bool
	tables map[string]*topoTable // by node id
	// byTopic is the node of the table of each changelog topic; names the
	// changelog topic of the first table of each name.
	byTopic, names map[string]string
}

func (g *graph) node(kind, name string) string {
	id := kind + ":" + name
	g.nodes[id] = topoNode{ID: id, Kind: kind, Name: name}
	return id
}

func (g *graph) edge(from, to string) { g.edges[topoEdge{From: from, To: to}] = true }

// table returns the table name whose changelog is topic ("": none), and
// adds its node: "table:<name>", or "table:<name>@<topic>" for a table
// of a name another table's changelog took first (tables of two
// deployments on one cluster).
func (g *graph) table(name, topic string) *topoTable {
	id, ok := g.byTopic[topic]
	if !ok || topic == "" {
		id = "table:" + name
		if first, ok := g.names[name]; ok && first != topic {
			id += "@" + topic
		} else {
			g.names[name] = topic
		}
		if topic != "" {
			g.byTopic[topic] = id
		}
	}
	g.nodes[id] = topoNode{ID: id, Kind: "table", Name: name}
	t := g.tables[id]
	if t == nil {
		t = &topoTable{ID: id, Table: name, Changelog: topic, Upstream: []changelogfmt.UpstreamVersion{}}
		g.tables[id] = t
	}
	return t
}

// addJobs adds what the job files say.
func (g *graph) addJobs(jobs []*pipelines.Pipeline) {
	for _, p := range jobs {
		job := g.node("job", p.Spec.Job.Name)
		for _, s := range p.Spec.Sources {
			kind := "source"
			if s.Kafka != nil && s.Kafka.Format.Changelog() {
				kind = "changelog"
			}
			for _, topic := range s.Topics() {
				g.edge(g.node(kind, topic), job)
			}
		}
		for _, t := range p.Tables {
			topic := ""
			if cl := t.Spec.Changelog; cl != nil {
				topic = cl.Topic
			}
			tt := g.table(t.Spec.Name, topic)
			g.edge(job, tt.ID)
			if topic != "" {
				g.edge(tt.ID, g.node("changelog", topic))
			}
		}
	}
}

// addVersion adds what a table's newest version says. Its sources and
// upstream versions are those of every job writing the table: with
// several, each is linked to all of them.
func (g *graph) addVersion(v export.Version, now time.Time) {
	t := g.table(v.Table, v.Topic)
	table := t.ID
	g.edge(table, g.node("changelog", v.Topic))
	for _, w := range v.Writers {
		job := g.node("job", w.Job)
		g.edge(job, table)
		for _, s := range v.Sources {
			g.edge(g.node("source", s), job)
		}
		for _, u := range v.Upstream {
			g.edge(g.node("changelog", u.Topic), job)
		}
	}
	t.Version, t.Upstream = &v, slices.Clone(v.Upstream)
	if t.Upstream == nil {
		t.Upstream = []changelogfmt.UpstreamVersion{}
	}
	if d, ok := export.Freshness(now, &v); ok {
		at, s := time.UnixMilli(v.EventTimeMs).UTC(), d.Seconds()
		t.EventTime, t.FreshnessSeconds = &at, &s
	}
}

// readTopology builds the topology of jobs and, when conn is set, of every
// versions topic of its cluster ("<changelog>.versions") and of the jobs'
// changelogs.
func readTopology(ctx context.Context, jobs []*pipelines.Pipeline, conn *kafka.Connection, now time.Time) (*topology, error) {
	g := &graph{nodes: map[string]topoNode{}, edges: map[topoEdge]bool{}, tables: map[string]*topoTable{},
		byTopic: map[string]string{}, names: map[string]string{}}
	g.addJobs(jobs)
	if conn != nil {
		topics, err := versionsTopics(ctx, *conn)
		if err != nil {
			return nil, err
		}
		for _, t := range g.tables {
			if t.Changelog != "" {
				topics = append(topics, changelogfmt.VersionsTopic(t.Changelog))
			}
		}
		slices.Sort(topics)
		vs, err := latestVersions(ctx, *conn, slices.Compact(topics))
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			g.addVersion(v, now)
		}
	}
	top := &topology{Now: now.UTC(), Read: topologyRead, Note: topologyNote, Nodes: []topoNode{}, Edges: []topoEdge{}, Tables: []topoTable{}}
	for _, id := range slices.Sorted(maps.Keys(g.nodes)) {
		top.Nodes = append(top.Nodes, g.nodes[id])
	}
	for e := range g.edges {
		top.Edges = append(top.Edges, e)
	}
	slices.SortFunc(top.Edges, func(a, b topoEdge) int { return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To)) })
	for _, name := range slices.Sorted(maps.Keys(g.tables)) {
		top.Tables = append(top.Tables, *g.tables[name])
	}
	return top, nil
}

// topologyReaders bounds the versions topics read at once.
const topologyReaders = 8

// latestVersions reads the newest version of each topic, topologyReaders
// at a time, in the order of topics; a topic without versions gives none,
// and so does one named like a versions topic that is not ebbflow's.
func latestVersions(ctx context.Context, conn kafka.Connection, topics []string) ([]export.Version, error) {
	type result struct {
		v   export.Version
		ok  bool
		err error
	}
	results := make([]result, len(topics))
	next := make(chan int)
	done := make(chan struct{})
	for range min(topologyReaders, len(topics)) {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				r := &results[i]
				r.v, r.ok, r.err = export.LatestVersion(ctx, conn, topics[i])
			}
		}()
	}
	for i := range topics {
		next <- i
	}
	close(next)
	for range min(topologyReaders, len(topics)) {
		<-done
	}
	var out []export.Version
	for _, r := range results {
		switch {
		case errors.Is(r.err, changelogfmt.ErrVersion):
		case r.err != nil:
			return nil, fmt.Errorf("topology: %w", r.err)
		case r.ok:
			out = append(out, r.v)
		}
	}
	return out, nil
}

// versionsTopics lists the topics of the cluster named like versions
// topics.
func versionsTopics(ctx context.Context, conn kafka.Connection) ([]string, error) {
	opts, err := conn.Options()
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("topology: list topics: %w", err)
	}
	var out []string
	for _, name := range details.Names() {
		if strings.HasSuffix(name, changelogfmt.VersionsTopic("")) {
			out = append(out, name)
		}
	}
	return out, nil
}

// topologyCluster is the connection of the cluster whose versions the
// topology of jobs reads: that of its first changelog, else of its first
// Kafka source; nil when the jobs use no Kafka.
func topologyCluster(jobs []*pipelines.Pipeline) *pipelines.Connection {
	for _, p := range jobs {
		for _, t := range p.Tables {
			if cl := t.Spec.Changelog; cl != nil {
				return &cl.Connection
			}
		}
	}
	for _, p := range jobs {
		for _, s := range p.Spec.Sources {
			if s.Kafka != nil {
				return &s.Kafka.Connection
			}
		}
	}
	return nil
}

// namesEmbedded reports whether c names the embedded broker.
func namesEmbedded(c *pipelines.Connection) bool {
	return len(c.Brokers) == 0 || (len(c.Brokers) == 1 && c.Brokers[0] == "embedded")
}

// apiTopology is GET /api/v1/topology: the runner's topology (JSON).
func (r *runner) apiTopology(w http.ResponseWriter, req *http.Request) {
	jobs := make([]*pipelines.Pipeline, 0, len(r.jobs))
	for _, j := range r.jobs {
		jobs = append(jobs, j.Pipeline())
	}
	ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
	defer cancel()
	var conn *kafka.Connection
	var err error
	if c := topologyCluster(jobs); c != nil {
		var kc kafka.Connection
		kc, err = r.env.KafkaConnection(*c)
		conn = &kc
	}
	var top *topology
	if err == nil {
		top, err = readTopology(ctx, jobs, conn, time.Now())
	}
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, top)
}

func newTopologyCmd() *cobra.Command {
	var d dataDirFlags
	var brokers []string
	var output, address string
	cmd := &cobra.Command{Use: "topology",
		Short: "Print the lineage of the tables (sources → jobs → tables → changelogs → jobs), each table's newest version and its freshness",
		Args:  noArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if output != "table" && output != "json" {
				return usageErr("-o %q: want table or json", output)
			}
			return d.resolve()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			top, err := topologyOf(ctx, &d, brokers, address)
			if err != nil {
				return err
			}
			return writeTopology(cmd.OutOrStdout(), top, output)
		}}
	d.add(cmd, "f")
	fl := cmd.Flags()
	fl.StringSliceVar(&brokers, "brokers", nil, "read the versions topics of this cluster (with the jobs of --file, if given); default: ask the runner using --data-dir, else read the cluster of the job files' changelogs, else the embedded broker of --data-dir")
	fl.StringVarP(&output, "output", "o", "table", "table or json")
	fl.StringVar(&address, "address", "", "ask the runner at this HTTP address, host:port or https://host:port")
	return cmd
}

// topologyOf reads the topology: from the cluster of --brokers, else from
// the runner using the data directory (or at address), else from the
// cluster of the job files, else from the data directory's embedded broker.
func topologyOf(ctx context.Context, d *dataDirFlags, brokers []string, address string) (*topology, error) {
	if len(brokers) > 0 {
		return readTopology(ctx, d.jobs, &kafka.Connection{Brokers: brokers}, time.Now())
	}
	e, err := findRunner(d.dataDir, address)
	if err != nil {
		return nil, err
	}
	if e != nil {
		var top topology
		if err := e.getJSON("/api/v1/topology", &top); err != nil {
			return nil, err
		}
		return &top, nil
	}
	if address != "" {
		return nil, usageErr("no runner answers at %s", address)
	}
	if c := topologyCluster(d.jobs); c != nil && !namesEmbedded(c) {
		// No embedded broker is started for a connection naming brokers.
		conn, err := build.NewEnv(build.Options{DataDir: d.dataDir}).KafkaConnection(*c)
		if err != nil {
			return nil, err
		}
		return readTopology(ctx, d.jobs, &conn, time.Now())
	}
	found, closeBroker, err := embeddedBrokers(d.dataDir)
	if err != nil {
		return nil, err
	}
	defer closeBroker()
	return readTopology(ctx, d.jobs, &kafka.Connection{Brokers: found}, time.Now())
}

// writeTopology prints the topology as JSON, or as a table of the tables
// followed by the edges of the graph.
func writeTopology(w io.Writer, top *topology, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(top)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tVERSION\tWRITERS\tUPSTREAM\tEVENT TIME\tFRESHNESS")
	for _, t := range top.Tables {
		version, writers, upstream, eventTime, fresh := "-", "-", "-", "-", "-"
		if v := t.Version; v != nil {
			version = fmt.Sprint(v.Version)
			var ws []string
			for _, wc := range v.Writers {
				ws = append(ws, fmt.Sprintf("%s@%d", wc.Job, wc.Checkpoint))
			}
			writers = strings.Join(ws, ",")
		}
		if len(t.Upstream) > 0 {
			var us []string
			for _, u := range t.Upstream {
				us = append(us, fmt.Sprintf("%s@%d", u.Table, u.Version))
			}
			upstream = strings.Join(us, ",")
		}
		if t.EventTime != nil {
			eventTime = t.EventTime.Format(time.RFC3339Nano)
			fresh = (time.Duration(*t.FreshnessSeconds * float64(time.Second))).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Table, version, writers, upstream, eventTime, fresh)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nLINEAGE\n")
	for _, e := range top.Edges {
		fmt.Fprintf(w, "  %s → %s\n", e.From, e.To)
	}
	_, err := fmt.Fprintf(w, "\n%s (at %s)\n", top.Note, top.Now.Format(time.RFC3339))
	return err
}
