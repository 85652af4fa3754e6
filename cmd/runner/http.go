package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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
}

type server struct {
	srv  *http.Server
	done chan struct{}
	file string
}

// serve starts the HTTP server and records its address in the data
// directory.
func (r *runner) serve(addr string) (*server, error) {
	ln, err := listen(addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", r.readyz)
	mux.HandleFunc("GET /api/v1/jobs", r.apiJobs)
	mux.HandleFunc("GET /api/v1/jobs/{name}/checkpoints", r.apiCheckpoints)
	mux.HandleFunc("GET /api/v1/tables", r.apiTables)
	mux.HandleFunc("GET /api/v1/tables/{name}/rows", r.apiRows)
	mux.HandleFunc("GET /api/v1/kafka", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"embedded_brokers": r.env.EmbeddedBrokers()})
	})
	mux.HandleFunc("POST /api/v1/stop", func(w http.ResponseWriter, _ *http.Request) {
		r.requestStop()
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "stopping"})
	})
	s := &server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{}),
		file: filepath.Join(r.dataDir, runnerFile)}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("http server", "err", err)
		}
	}()
	info, _ := json.Marshal(runnerInfo{PID: os.Getpid(), HTTP: ln.Addr().String()})
	if _, _, err := state.WriteFileAtomic(s.file, func(w io.Writer) error {
		_, err := w.Write(info)
		return err
	}); err != nil {
		r.log.Warn("record the runner's address", "file", s.file, "err", err)
	}
	r.log.Info("http listening", "address", ln.Addr().String())
	return s, nil
}

func (s *server) shutdown() {
	_ = os.Remove(s.file)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
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
}

// status describes a job. Its phase is restoring (or starting, without a
// checkpoint to restore) until it completed a checkpoint in this run, then
// running, then stopped or failed.
func (r *runner) status(j *build.Job) jobStatus {
	st := jobStatus{Name: j.Name(), Parallelism: j.Pipeline().Spec.Job.Parallelism}
	st.Healthy, st.Health = j.Healthy()
	r.mu.Lock()
	err, ended := r.mu.done[j.Name()]
	r.mu.Unlock()
	switch {
	case ended && err != nil:
		st.Phase, st.Error = "failed", err.Error()
	case ended:
		st.Phase = "stopped"
	case j.Ready():
		st.Phase = "running"
	case j.Restoring():
		st.Phase = "restoring"
	default:
		st.Phase = "starting"
	}
	if cps, err := build.ListCheckpoints(r.dataDir, j.Name()); err == nil {
		for i := len(cps) - 1; i >= 0; i-- {
			if cps[i].Completed {
				id := uint64(cps[i].ID)
				st.LastCheckpoint = &id
				break
			}
		}
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
	writeJSON(w, code, map[string]any{"phase": phase, "progress": float64(ready) / float64(max(len(r.jobs), 1)), "jobs": jobs})
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
	name := req.PathValue("name")
	for _, j := range r.jobs {
		if j.Name() == name {
			cps, err := listCheckpoints(r.dataDir, name)
			if err != nil {
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, cps)
			return
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no job %q", name)})
}

// tableInfo describes a table in the API.
type tableInfo struct {
	Name    string            `json:"name"`
	Rows    uint64            `json:"rows"`
	Buckets int               `json:"buckets"`
	Key     []aggmerge.Column `json:"key"`
	Columns []aggmerge.Column `json:"columns"`
}

func (r *runner) apiTables(w http.ResponseWriter, _ *http.Request) {
	tables := []tableInfo{}
	for _, name := range r.env.TableNames() {
		t, _ := r.env.Table(name)
		s := t.Schema()
		tables = append(tables, tableInfo{Name: name, Rows: t.Count(), Buckets: s.Buckets, Key: s.Key, Columns: s.Values})
	}
	writeJSON(w, http.StatusOK, tables)
}

// apiRows writes the rows of a table (or the one of ?key=) as JSON, one
// object per line.
func (r *runner) apiRows(w http.ResponseWriter, req *http.Request) {
	t, ok := r.env.Table(req.PathValue("name"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no table %q", req.PathValue("name"))})
		return
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

// lockDataDir takes an exclusive lock on the data directory, so that two
// runners never share one.
func lockDataDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "runner.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s is used by another runner: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
