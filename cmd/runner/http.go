package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/state"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3").
var version = "dev"

// revision returns the VCS revision the binary was built from.
func revision() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ebbflow_build_info", Help: "The runner's version, revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision(), "goversion": goVersion()}})
	g.Set(1)
	return g
}

func goVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.GoVersion
	}
	return "unknown"
}

// runnerFile, in the data directory, holds the HTTP address of the runner
// using it, so that commands on the same data directory can reach it.
const runnerFile = "runner.json"

type runnerInfo struct {
	PID  int    `json:"pid"`
	HTTP string `json:"http"`
	// TLSCertSHA256 is, when the server speaks HTTPS, the SHA-256 of its
	// certificate (hex), which the commands on the data directory accept
	// whatever the names in it.
	TLSCertSHA256 string `json:"tls_cert_sha256,omitempty"`
}

type server struct {
	srv         *http.Server
	done        chan struct{}
	file        string
	stopSampler func() // the dashboard's samples (runner.sampler)
}

// serve starts the HTTP server (HTTPS with cfg.TLS), guarded by a guard,
// and records its address in the data directory.
func (r *runner) serve(addr string, cfg pipelines.HTTP) (*server, error) {
	var tlsConfig *tls.Config
	info := runnerInfo{PID: os.Getpid()}
	if cfg.TLS != nil {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			return nil, usageErr("http.tls: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		sum := sha256.Sum256(cert.Certificate[0])
		info.TLSCertSHA256 = hex.EncodeToString(sum[:])
	}
	token, err := httpToken(r.dataDir)
	if err != nil {
		return nil, err
	}
	ln, err := listen(addr)
	if err != nil {
		return nil, err
	}
	info.HTTP = ln.Addr().String()
	g := newGuard(addr, cfg.AllowedHosts, token, ln.Addr())
	switch {
	case !g.readsNeedToken:
		r.log.Info("http listening", "address", info.HTTP, "tls", tlsConfig != nil)
	case tlsConfig == nil:
		r.log.Warn("http listening on a non-loopback address without TLS: whoever reaches it reads /metrics, /livez and /readyz, "+
			"and the API's token ("+tokenFile+") travels unencrypted; set http.tls, or listen on loopback", "address", info.HTTP)
	default:
		r.log.Warn("http listening on a non-loopback address: whoever reaches it reads /metrics, /livez and /readyz; "+
			"the API needs the token ("+tokenFile+")", "address", info.HTTP, "tls", true)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	g.next = r.routes()
	s := &server{srv: &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(r.log.Handler(), slog.LevelDebug)}, done: make(chan struct{}),
		file: filepath.Join(r.dataDir, runnerFile), stopSampler: r.sampler()}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("http server", "err", err)
		}
	}()
	b, _ := json.Marshal(info)
	if _, _, err := state.WriteFileAtomic(s.file, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}); err != nil {
		r.log.Warn("record the runner's address", "file", s.file, "err", err)
	}
	return s, nil
}

// routes are the endpoints of the server.
func (r *runner) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", r.readyz)
	mux.HandleFunc("GET /api/v1/jobs", r.apiJobs)
	mux.HandleFunc("GET /api/v1/jobs/{name}/checkpoints", r.apiCheckpoints)
	mux.HandleFunc("GET /api/v1/tables", r.apiTables)
	mux.HandleFunc("GET /api/v1/tables/{name}/rows", r.apiRows)
	mux.HandleFunc("GET /api/v1/topology", r.apiTopology)
	mux.HandleFunc("GET /api/v1/snapshot", r.apiSnapshot)
	mux.HandleFunc("GET /api/v1/kafka", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"embedded_brokers": r.env.EmbeddedBrokers()})
	})
	mux.HandleFunc("POST /api/v1/stop", func(w http.ResponseWriter, _ *http.Request) {
		r.requestStop()
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "stopping"})
	})
	r.dashboardRoutes(mux)
	return mux
}

// tokenFile, in the data directory, holds the bearer token the HTTP API
// wants of every request that changes state (mode 0600).
const tokenFile = "http.token"

// httpToken returns the token of the data directory, made (rand.Text: 130
// bits) by the first runner that serves HTTP on it and kept from then on.
// The caller holds the directory's lock.
func httpToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, tokenFile)
	tok, err := readToken(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	tok = rand.Text()
	// WriteFileAtomic's temporary file, renamed into place, has mode 0600.
	if _, _, err := state.WriteFileAtomic(path, func(w io.Writer) error {
		_, err := io.WriteString(w, tok+"\n")
		return err
	}); err != nil {
		return "", fmt.Errorf("make the HTTP token: %w", err)
	}
	return tok, nil
}

// readToken reads a token file, refusing one that users other than its
// owner may read (its token is no secret any more).
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("HTTP token %s has mode %v, open to other users: remove it (a new one is made) or chmod 600 it", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return "", fmt.Errorf("read the HTTP token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("HTTP token %s is empty: remove it (a new one is made)", path)
	}
	return tok, nil
}

// guard checks every request before the routes, against a page in a local
// browser that aims at the server (cross-origin requests, DNS rebinding)
// and against unauthenticated changes:
//   - its Host must be an IP address, localhost, the host of http.address
//     or one of http.allowed_hosts (403), as a DNS rebinding attack sends
//     the attacker's name;
//   - a request other than GET /metrics, /livez or /readyz a browser sent
//     from another origin (Sec-Fetch-Site, Origin) is refused (403);
//   - a request that changes state (any method but GET and HEAD), and when
//     the server listens beyond loopback any API request, must carry the
//     data directory's token as "Authorization: Bearer <token>" (401); the
//     dashboard's static files (dashboardPath), which hold no data, never
//     need it.
type guard struct {
	next           http.Handler
	hosts          map[string]bool // lower case, besides localhost and IP addresses
	token          []byte
	readsNeedToken bool
}

func newGuard(addr string, allowed []string, token string, bound net.Addr) *guard {
	g := &guard{hosts: map[string]bool{}, token: []byte(token)}
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
		g.hosts[strings.ToLower(h)] = true
	}
	for _, h := range allowed {
		g.hosts[strings.ToLower(h)] = true
	}
	tcp, ok := bound.(*net.TCPAddr)
	g.readsNeedToken = !ok || !tcp.IP.IsLoopback()
	return g
}

func (g *guard) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !g.hostAllowed(req.Host) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": fmt.Sprintf(
			"host %q is not a name of this server: use an IP address or localhost, or add it to http.allowed_hosts", req.Host)})
		return
	}
	read := req.Method == http.MethodGet || req.Method == http.MethodHead
	if read && (req.URL.Path == "/metrics" || req.URL.Path == "/livez" || req.URL.Path == "/readyz") {
		g.next.ServeHTTP(w, req)
		return
	}
	if err := crossOrigin(req); err != nil {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
		return
	}
	if (!read || g.readsNeedToken && !dashboardPath(req.URL.Path)) && !g.authorized(req) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ebbflow runner"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "this request needs the token of " + tokenFile +
			" in the runner's data directory, as the header Authorization: Bearer <token>"})
		return
	}
	g.next.ServeHTTP(w, req)
}

// hostAllowed reports whether the Host header names this server. An IP
// address is always accepted: a page can only reach the server through one
// with an origin of its own (the IP), and a rebinding attack needs a name.
func (g *guard) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host == "localhost" || g.hosts[host]
}

// crossOrigin returns why a browser sent req on behalf of a page of another
// origin, or nil (also for requests not from a browser, which send neither
// header).
func crossOrigin(req *http.Request) error {
	switch site := req.Header.Get("Sec-Fetch-Site"); site {
	case "same-origin", "none":
		return nil
	case "":
	default:
		return fmt.Errorf("cross-origin request refused (Sec-Fetch-Site: %s)", site)
	}
	origin := req.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err != nil || u.Host == "" || !strings.EqualFold(u.Host, req.Host) {
		return fmt.Errorf("cross-origin request refused (Origin %s, Host %s)", origin, req.Host)
	}
	return nil
}

// authorized reports whether req carries the token, compared in constant
// time.
func (g *guard) authorized(req *http.Request) bool {
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), g.token) == 1
}

func (s *server) shutdown() {
	_ = os.Remove(s.file)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
	s.stopSampler()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

type jobStatus struct {
	Name           string  `json:"name"`
	Phase          string  `json:"phase"`
	Healthy        bool    `json:"healthy"`
	Health         string  `json:"health"`
	Parallelism    int     `json:"parallelism"`
	Error          string  `json:"error,omitempty"`
	LastCheckpoint *uint64 `json:"last_checkpoint,omitempty"`
	// From the runtime's status (runtime.JobStatus).
	State              string            `json:"state"`
	StateSince         time.Time         `json:"state_since"`
	UptimeSeconds      float64           `json:"uptime_seconds"`
	Attempt            int               `json:"attempt"`
	Restarts           int               `json:"restarts"`
	LastFailure        *failureInfo      `json:"last_failure,omitempty"`
	RestoredCheckpoint *uint64           `json:"restored_checkpoint,omitempty"`
	LastCompleted      *checkpointStatus `json:"last_completed_checkpoint,omitempty"`
	InFlight           *checkpointStatus `json:"checkpoint_in_flight,omitempty"`
	CutGates           *cutGatesStatus   `json:"cut_gates,omitempty"`
	Checkpoints        int               `json:"checkpoints_completed"`
	Tasks              []taskInfo        `json:"tasks,omitempty"`
	Scale              *scaleStatus      `json:"scale,omitempty"`
}

// scaleStatus is what an instance of a scaled job owns (docs/SCALING.md):
// its buckets, and the input partitions its stage 1 has from the group.
type scaleStatus struct {
	Instance         int    `json:"instance"`
	Instances        int    `json:"instances"`
	RepartitionTopic string `json:"repartition_topic"`
	// OwnedBuckets are the buckets (repartition partitions) it applies, of
	// Buckets: with Ownership "group", those the owners group assigned it
	// now (none during a handover).
	OwnedBuckets    []int              `json:"owned_buckets"`
	Ownership       string             `json:"ownership,omitempty"`
	Buckets         int                `json:"buckets"`
	InputPartitions map[string][]int32 `json:"input_partitions"`
	// Stage1Healthy is false while stage 1 retries a failure, which
	// Stage1Error names.
	Stage1Healthy bool   `json:"stage1_healthy"`
	Stage1Error   string `json:"stage1_error,omitempty"`
}

func scaleStatusOf(s *build.ScaleState) *scaleStatus {
	if s == nil {
		return nil
	}
	st := &scaleStatus{Instance: s.Instance, Instances: s.Instances, RepartitionTopic: s.RepartitionTopic, OwnedBuckets: s.OwnedBuckets(), Buckets: s.Of,
		InputPartitions: s.InputPartitions()}
	if s.Dynamic() {
		st.Ownership = string(pipelines.OwnershipGroup)
	}
	st.Stage1Healthy, st.Stage1Error = s.Stage1Health()
	return st
}

// cutGatesStatus is runtime.CutGateStatus: the gates of aligned sources.
type cutGatesStatus struct {
	Open  int `json:"open"`
	Total int `json:"total"`
}

type failureInfo struct {
	Error string    `json:"error"`
	Time  time.Time `json:"time"`
}

// checkpointStatus is the last completed checkpoint (all fields) or the one
// in flight (id, final, triggered).
type checkpointStatus struct {
	ID         uint64    `json:"id"`
	Final      bool      `json:"final,omitempty"`
	Triggered  time.Time `json:"triggered"`
	Completed  time.Time `json:"completed,omitzero"`
	DurationMS *float64  `json:"duration_ms,omitempty"`
	SizeBytes  *int64    `json:"size_bytes,omitempty"`
	// Waiting: of the checkpoint in flight, the subtasks that have not
	// acknowledged it yet ("chain (i/p)").
	Waiting []string `json:"waiting,omitempty"`
}

// taskInfo is the progress of one subtask.
type taskInfo struct {
	Chain      string   `json:"chain"`
	Operators  []string `json:"operators"`
	Subtask    int      `json:"subtask"`
	Source     bool     `json:"source,omitempty"`
	State      string   `json:"state"`
	RecordsIn  int64    `json:"records_in"`
	RecordsOut int64    `json:"records_out"`
}

// status describes a job. Its phase is restoring (or starting, without a
// checkpoint to restore) until it completed a checkpoint in this run, then
// running, then stopped or failed.
func (r *runner) status(j *build.Job) jobStatus {
	rs := j.Status()
	st := jobStatus{Name: j.Name(), Parallelism: j.Pipeline().Spec.Job.Parallelism, State: string(rs.State), StateSince: rs.Since,
		Attempt: rs.Attempt, Restarts: rs.Restarts, Checkpoints: rs.Completed, Scale: scaleStatusOf(j.Scale())}
	if !r.started.IsZero() {
		st.UptimeSeconds = time.Since(r.started).Seconds()
	}
	st.Healthy, st.Health = j.Healthy()
	r.mu.Lock()
	err, ended := r.mu.done[j.Name()]
	r.mu.Unlock()
	switch {
	case ended && err != nil:
		st.Phase, st.Error = "failed", err.Error()
	case ended:
		st.Phase = "stopped"
	case rs.Completed > 0:
		st.Phase = "running"
	case j.Restoring():
		st.Phase = "restoring"
	default:
		st.Phase = "starting"
	}
	if f := rs.LastFailure; f != nil {
		st.LastFailure = &failureInfo{Error: f.Err.Error(), Time: f.Time}
	}
	if c := rs.Restored; c != nil {
		id := uint64(c.ID)
		st.RestoredCheckpoint, st.LastCheckpoint = &id, &id
	}
	if c := rs.LastCompleted; c != nil {
		id, ms, size := uint64(c.ID), float64(c.Duration)/float64(time.Millisecond), c.Size
		st.LastCheckpoint = &id
		st.LastCompleted = &checkpointStatus{ID: id, Final: c.Final, Triggered: c.Triggered, Completed: c.Completed,
			DurationMS: &ms, SizeBytes: &size}
	}
	if c := rs.InFlight; c != nil {
		st.InFlight = &checkpointStatus{ID: uint64(c.ID), Final: c.Final, Triggered: c.Triggered, Waiting: c.Waiting}
	}
	if g := rs.CutGates; g != nil {
		st.CutGates = &cutGatesStatus{Open: g.Open, Total: g.Total}
	}
	for _, t := range rs.Tasks {
		st.Tasks = append(st.Tasks, taskInfo{Chain: t.Chain, Operators: t.Operators, Subtask: t.Subtask, Source: t.Source, State: string(t.State),
			RecordsIn: t.RecordsIn, RecordsOut: t.RecordsOut})
	}
	return st
}

func (r *runner) readyz(w http.ResponseWriter, _ *http.Request) {
	ready := 0
	var jobs []jobStatus
	for _, j := range r.jobs {
		st := r.status(j)
		if st.Phase == "running" && st.Healthy {
			ready++
		}
		jobs = append(jobs, st)
	}
	code, phase := http.StatusOK, "running"
	if ready < len(r.jobs) {
		code, phase = http.StatusServiceUnavailable, "not ready"
		for _, st := range jobs {
			if st.Phase != "running" {
				phase = st.Phase
				break
			}
		}
		if phase == "not ready" {
			phase = "unhealthy"
		}
	}
	// How many of the jobs are ready, not how far a restore has got: the
	// runtime reports phases, not a restore percentage.
	body := map[string]any{"phase": phase, "jobs_ready": ready, "jobs_total": len(r.jobs), "jobs": jobs}
	if warn := lowSpaceWarning(r.dataDir, r.flags.minFreeSpace); warn != "" {
		body["warnings"] = []string{warn}
	}
	writeJSON(w, code, body)
}

func (r *runner) apiJobs(w http.ResponseWriter, _ *http.Request) {
	jobs := []jobStatus{}
	for _, j := range r.jobs {
		jobs = append(jobs, r.status(j))
	}
	writeJSON(w, http.StatusOK, jobs)
}

// checkpointInfo is one checkpoint as the API and the CLI show it.
type checkpointInfo struct {
	ID        uint64    `json:"id"`
	Completed bool      `json:"completed"`
	Time      time.Time `json:"time,omitzero"`
	Final     bool      `json:"final,omitempty"`
	Error     string    `json:"error,omitempty"`
}

func listCheckpoints(dataDir, job string) ([]checkpointInfo, error) {
	dir := build.CheckpointDir(dataDir, job)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("job %q has no checkpoints in %s: %w", job, dataDir, err)
	}
	s, err := state.OpenStorage(dir)
	if err != nil {
		return nil, err
	}
	cps, err := s.List()
	if err != nil {
		return nil, err
	}
	out := make([]checkpointInfo, 0, len(cps))
	for _, cp := range cps {
		info := checkpointInfo{ID: uint64(cp.ID), Completed: cp.Completed}
		if cp.Completed {
			if md, err := s.Load(cp.ID); err != nil {
				info.Error = err.Error()
			} else {
				info.Time, info.Final = md.Time, md.Final
			}
		}
		out = append(out, info)
	}
	return out, nil
}

func (r *runner) apiCheckpoints(w http.ResponseWriter, req *http.Request) {
	j := r.job(w, req)
	if j == nil {
		return
	}
	cps, err := listCheckpoints(r.dataDir, j.Name())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, cps)
}

// tableInfo describes a table in the API.
type tableInfo struct {
	Name    string            `json:"name"`
	Rows    uint64            `json:"rows"`
	Buckets int               `json:"buckets"`
	Key     []aggmerge.Column `json:"key"`
	Columns []aggmerge.Column `json:"columns"`
	// Scale, for a table of a scaled job, says which buckets this runner
	// holds (the others are other instances').
	Scale *tableScale `json:"scale,omitempty"`
	tableDetail
}

func (r *runner) apiTables(w http.ResponseWriter, _ *http.Request) {
	tables := []tableInfo{}
	undos := r.undos()
	for _, name := range r.env.TableNames() {
		t, _ := r.env.Table(name)
		s := t.Schema()
		tables = append(tables, tableInfo{Name: name, Rows: t.Count(), Buckets: s.Buckets, Key: s.Key, Columns: s.Values,
			Scale: r.scaleOf(name, s.Buckets), tableDetail: tableDetailOf(t, undos)})
	}
	writeJSON(w, http.StatusOK, tables)
}

// apiRows writes the rows of a table (or the one of ?key=) as JSON, one
// object per line; with ?all=true, a scaled job's whole table
// (apiAllRows).
func (r *runner) apiRows(w http.ResponseWriter, req *http.Request) {
	t, ok := r.env.Table(req.PathValue("name"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no table %q", req.PathValue("name"))})
		return
	}
	q := req.URL.Query()
	if s := q.Get("all"); s != "" {
		all, err := strconv.ParseBool(s)
		switch {
		case err != nil:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("all=%q: want true or false", s)})
			return
		case all && q.Get("key") != "":
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "give all or key"})
			return
		case all && r.apiAllRows(w, req, t):
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	out := &jsonLines{w: w, cols: columns(t.Schema())}
	if err := readRows(t, req.URL.Query().Get("key"), out.row); err != nil {
		if !out.started {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		r.log.Warn("table rows", "table", req.PathValue("name"), "err", err)
	}
}

// lockFile, in the data directory, is locked (flock) by the process using
// it: the runner, or a command that opens its files. It holds that
// process's pid.
const lockFile = "runner.lock"

// lockDataDir takes an exclusive lock on the data directory, so that two
// runners never share one, and records the pid in it. A directory another
// process holds is refused, naming the process.
func lockDataDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, dataDirInUse(dir)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	// The pid only serves the message above: a lock held is what counts,
	// so a failure to record it is no failure.
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// dataDirInUse says who holds the lock of the data directory: the runner
// whose runner.json names the pid in the lock file, with its HTTP address,
// else the pid.
func dataDirInUse(dir string) error {
	b, _ := os.ReadFile(filepath.Join(dir, lockFile))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	var info runnerInfo
	if b, err := os.ReadFile(filepath.Join(dir, runnerFile)); err == nil && json.Unmarshal(b, &info) == nil &&
		info.HTTP != "" && (pid == 0 || info.PID == pid) {
		return fmt.Errorf("the data directory %s is in use by a running runner (pid %d, http %s): stop it first with `runner stop --data-dir %s`",
			dir, info.PID, info.HTTP, dir)
	}
	who := "another process"
	if pid > 0 {
		who = fmt.Sprintf("process %d", pid)
	}
	return fmt.Errorf("the data directory %s is in use by %s, a runner (without HTTP) or a runner command on it: "+
		"stop the runner first (SIGTERM or Ctrl-C: it takes a final checkpoint), or wait for the command to end", dir, who)
}
