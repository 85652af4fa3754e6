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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// topologyRead says what a topology's versions are: per table its newest,
// and per part of the graph its newest consistent version (the versions a
// consistent read of the part's tables returns).
const (
	topologyRead = "newest and consistent"
	topologyNote = "VERSION is each table's newest, FRESHNESS now minus the source event time it covers; " +
		"CONSISTENT is the version of the newest consistent version of the table's part of the topology " +
		"(what a consistent read of the part returns), C-FRESHNESS now minus the event time every table of that set covers"
)

// topologyKept bounds the versions of each table the topology reads: the
// consistent version of a part is found among its tables' newest
// topologyKept versions.
const topologyKept = 1000

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
	// Consistent holds, per part of the graph (tables linked by the
	// upstream versions they name), its newest consistent version.
	Consistent []topoConsistent `json:"consistent"`
}

// topoConsistent is the newest consistent version of a part of the graph
// (export.ChooseConsistent: the choice of consistent reads, over all the
// part's tables).
type topoConsistent struct {
	Tables []string `json:"tables"` // their nodes
	// Versions are the tables' versions in the set (absent when none fits:
	// Error says why).
	Versions []uint64 `json:"versions,omitempty"`
	Error    string   `json:"error,omitempty"`
	// EventTime is the newest source event time every version of the set
	// covers (the least of theirs) and FreshnessSeconds now minus it (nil:
	// unknown).
	EventTime        *time.Time `json:"event_time"`
	FreshnessSeconds *float64   `json:"freshness_seconds"`
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
	// ConsistentVersion is its version in the newest consistent version
	// of its part of the graph, and ConsistentFreshnessSeconds that set's
	// freshness (topoConsistent; nil: none, or unknown).
	ConsistentVersion          *uint64  `json:"consistent_version"`
	ConsistentFreshnessSeconds *float64 `json:"consistent_freshness_seconds"`
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
	t.EventTime, t.FreshnessSeconds = eventTimeAndFreshness(now, v.EventTimeMs)
}

// eventTimeAndFreshness is event time ms and now minus it (nil: unknown).
func eventTimeAndFreshness(now time.Time, ms int64) (*time.Time, *float64) {
	d, ok := export.Freshness(now, &export.Version{EventTimeMs: ms})
	if !ok {
		return nil, nil
	}
	at, s := time.UnixMilli(ms).UTC(), d.Seconds()
	return &at, &s
}

// addConsistent chooses the newest consistent version of each part of the
// tables (export.ChooseConsistent) and adds it.
func (g *graph) addConsistent(tables []export.TableVersions, now time.Time) []topoConsistent {
	out := []topoConsistent{}
	for _, c := range export.ChooseConsistent(tables) {
		tc := topoConsistent{Tables: []string{}}
		if c.Err != nil {
			tc.Error = c.Err.Error()
		} else {
			tc.EventTime, tc.FreshnessSeconds = eventTimeAndFreshness(now, c.EventTimeMs)
		}
		for i, topic := range c.Topics {
			t := g.tables[g.byTopic[topic]]
			tc.Tables = append(tc.Tables, t.ID)
			if c.Err == nil {
				n := c.Versions[i].Version
				tc.Versions = append(tc.Versions, n)
				t.ConsistentVersion, t.ConsistentFreshnessSeconds = &n, tc.FreshnessSeconds
			}
		}
		out = append(out, tc)
	}
	return out
}

// readTopology builds the topology of jobs and, when conn is set, of every
// versions topic of its cluster ("<changelog>.versions") and of the jobs'
// changelogs, read with readers (nil: readers of its own, closed after).
func readTopology(ctx context.Context, jobs []*pipelines.Pipeline, conn *kafka.Connection, readers *export.VersionsReaders, now time.Time) (*topology, error) {
	g := &graph{nodes: map[string]topoNode{}, edges: map[topoEdge]bool{}, tables: map[string]*topoTable{},
		byTopic: map[string]string{}, names: map[string]string{}}
	g.addJobs(jobs)
	consistent := []topoConsistent{}
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
		topics = slices.Compact(topics)
		if readers == nil {
			if readers, err = export.NewVersionsReaders(*conn, topologyKept); err != nil {
				return nil, fmt.Errorf("topology: %w", err)
			}
			defer readers.Close()
		}
		var tables []export.TableVersions
		for i, r := range readers.Read(ctx, topics) {
			changelog := strings.TrimSuffix(topics[i], changelogfmt.VersionsTopic(""))
			switch {
			case errors.Is(r.Err, changelogfmt.ErrVersion): // not ebbflow's
			case r.Err != nil:
				return nil, fmt.Errorf("topology: %w", r.Err)
			case len(r.Versions) > 0:
				g.addVersion(r.Versions[len(r.Versions)-1], now)
				tables = append(tables, export.TableVersions{Topic: r.Versions[0].Topic, Versions: r.Versions})
			case g.byTopic[changelog] != "":
				// A table of the job files without versions yet: its
				// part has no consistent version.
				tables = append(tables, export.TableVersions{Topic: changelog})
			}
		}
		consistent = g.addConsistent(tables, now)
	}
	top := &topology{Now: now.UTC(), Read: topologyRead, Note: topologyNote, Nodes: []topoNode{}, Edges: []topoEdge{}, Tables: []topoTable{},
		Consistent: consistent}
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

// topology reads the topology of the runner's jobs, with the
// versions readers the runner keeps (one set, made on first use, closed
// by closeTopology).
func (r *runner) topology(ctx context.Context) (*topology, error) {
	jobs := make([]*pipelines.Pipeline, 0, len(r.jobs))
	for _, j := range r.jobs {
		jobs = append(jobs, j.Pipeline())
	}
	c := topologyCluster(jobs)
	if c == nil {
		return readTopology(ctx, jobs, nil, nil, time.Now())
	}
	conn, err := r.env.KafkaConnection(*c)
	if err != nil {
		return nil, err
	}
	r.topo.Lock()
	if r.topo.readers == nil {
		if r.topo.readers, err = export.NewVersionsReaders(conn, topologyKept); err != nil {
			r.topo.Unlock()
			return nil, fmt.Errorf("topology: %w", err)
		}
	}
	readers := r.topo.readers
	r.topo.Unlock()
	return readTopology(ctx, jobs, &conn, readers, time.Now())
}

// closeTopology closes the versions readers of runner.topology.
func (r *runner) closeTopology() {
	r.topo.Lock()
	defer r.topo.Unlock()
	if r.topo.readers != nil {
		r.topo.readers.Close()
		r.topo.readers = nil
	}
}

// apiTopology is GET /api/v1/topology: the runner's topology (JSON).
func (r *runner) apiTopology(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
	defer cancel()
	top, err := r.topology(ctx)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, top)
}

// topologyFreshness is ebbflow_topology_freshness_seconds{table}: for each
// table of the runner's jobs with a changelog, the freshness of the newest
// consistent version of its part of the topology (topoConsistent), read
// from Kafka at each scrape (for at most topologyScrapeTimeout); absent
// while unknown.
type topologyFreshness struct {
	r    *runner
	desc *prometheus.Desc
}

// topologyScrapeTimeout bounds the reading of the topology for a scrape.
const topologyScrapeTimeout = 5 * time.Second

func newTopologyFreshness(r *runner) topologyFreshness {
	return topologyFreshness{r: r, desc: prometheus.NewDesc("ebbflow_topology_freshness_seconds",
		"Now minus the newest source event time covered by the newest consistent version of the table's part of the topology "+
			"(the versions a consistent read of its tables returns); absent while unknown.", []string{"table"}, nil)}
}

func (f topologyFreshness) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

func (f topologyFreshness) Collect(ch chan<- prometheus.Metric) {
	ours := map[string]bool{} // changelog topics of the runner's tables
	for _, j := range f.r.jobs {
		for _, t := range j.Pipeline().Tables {
			if cl := t.Spec.Changelog; cl != nil {
				ours[cl.Topic] = true
			}
		}
	}
	if len(ours) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), topologyScrapeTimeout)
	defer cancel()
	top, err := f.r.topology(ctx)
	if err != nil {
		f.r.log.Debug("metrics: read the topology", "err", err)
		return
	}
	for _, t := range top.Tables {
		if ours[t.Changelog] && t.ConsistentFreshnessSeconds != nil {
			ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, *t.ConsistentFreshnessSeconds, t.Table)
		}
	}
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
		return readTopology(ctx, d.jobs, &kafka.Connection{Brokers: brokers}, nil, time.Now())
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
		return readTopology(ctx, d.jobs, &conn, nil, time.Now())
	}
	found, closeBroker, err := embeddedBrokers(d.dataDir)
	if err != nil {
		return nil, err
	}
	defer closeBroker()
	return readTopology(ctx, d.jobs, &kafka.Connection{Brokers: found}, nil, time.Now())
}

// seconds prints a freshness in seconds as a duration, to the millisecond.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
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
	fmt.Fprintln(tw, "TABLE\tVERSION\tWRITERS\tUPSTREAM\tEVENT TIME\tFRESHNESS\tCONSISTENT\tC-FRESHNESS")
	for _, t := range top.Tables {
		version, writers, upstream, eventTime, fresh, consistent, cFresh := "-", "-", "-", "-", "-", "-", "-"
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
			fresh = seconds(*t.FreshnessSeconds)
		}
		if t.ConsistentVersion != nil {
			consistent = fmt.Sprint(*t.ConsistentVersion)
		}
		if t.ConsistentFreshnessSeconds != nil {
			cFresh = seconds(*t.ConsistentFreshnessSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Table, version, writers, upstream, eventTime, fresh, consistent, cFresh)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range top.Consistent {
		if c.Error != "" {
			fmt.Fprintf(w, "\nno consistent version of %s: %s\n", strings.Join(c.Tables, ", "), c.Error)
		}
	}
	fmt.Fprintf(w, "\nLINEAGE\n")
	for _, e := range top.Edges {
		fmt.Fprintf(w, "  %s → %s\n", e.From, e.To)
	}
	_, err := fmt.Fprintf(w, "\n%s (at %s)\n", top.Note, top.Now.Format(time.RFC3339))
	return err
}
