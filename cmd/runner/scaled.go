package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/pipelines/build"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// tableScale says, in the API and to table scan, that a table holds only
// the buckets of one instance of a scaled job (docs/SCALING.md).
type tableScale struct {
	Job       string `json:"job"`
	Instance  int    `json:"instance"`
	Instances int    `json:"instances"`
	// Buckets are the buckets this instance owns and applies, of Of.
	Buckets []int `json:"buckets"`
	Of      int   `json:"of"`
	// Ownership is "group" when the buckets move between the instances
	// (they are then those it owns now, or held at its stop).
	Ownership string `json:"ownership,omitempty"`
}

func newTableScale(job string, instance, instances, buckets int) *tableScale {
	sc := &pipelines.Scale{Instance: instance, Instances: instances}
	return &tableScale{Job: job, Instance: instance, Instances: instances, Buckets: build.OwnedBuckets(sc, buckets), Of: buckets}
}

// dynamic reports whether the buckets move between the instances.
func (s *tableScale) dynamic() bool { return s.Ownership == string(pipelines.OwnershipGroup) }

// note is what table scan says of the rows it prints.
func (s *tableScale) note(table string) string {
	bs := make([]string, len(s.Buckets))
	for i, b := range s.Buckets {
		bs[i] = fmt.Sprint(b)
	}
	if s.dynamic() {
		return fmt.Sprintf("runner: table %q holds only the buckets that instance %d of the scaled job %q owns (ownership group: they move between instances): "+
			"%d of %d buckets (%s); `table scan --all` reads the whole table from its owner log", table, s.Instance, s.Job, len(s.Buckets), s.Of, strings.Join(bs, ", "))
	}
	return fmt.Sprintf("runner: table %q holds only the buckets of instance %d of %d of the scaled job %q: %d of %d buckets (%s); "+
		"`table scan --all` reads the whole table from its changelog", table, s.Instance, s.Instances, s.Job, len(s.Buckets), s.Of, strings.Join(bs, ", "))
}

// scaleOf is the part of table name that this runner holds, nil when no
// scaled job writes it.
func (r *runner) scaleOf(name string, buckets int) *tableScale {
	for _, j := range r.jobs {
		p := j.Pipeline()
		if p.Spec.Job.Scale == nil || len(p.Tables) == 0 || p.Tables[0].Spec.Name != name {
			continue
		}
		st := j.Scale()
		if !st.Dynamic() {
			return newTableScale(p.Spec.Job.Name, st.Instance, st.Instances, buckets)
		}
		return &tableScale{Job: p.Spec.Job.Name, Instance: st.Instance, Buckets: st.OwnedBuckets(), Of: buckets,
			Ownership: string(pipelines.OwnershipGroup)}
	}
	return nil
}

func (r *runner) pipelines() []*pipelines.Pipeline {
	ps := make([]*pipelines.Pipeline, len(r.jobs))
	for i, j := range r.jobs {
		ps[i] = j.Pipeline()
	}
	return ps
}

// localScale is the part of table t of a data directory that it holds:
// that of the scaled job registered as its writer, as the data directory
// recorded it (build.ReadScaleInfo); nil when none is scaled.
func localScale(dataDir string, t *aggmerge.Table) (*tableScale, error) {
	for _, reg := range t.Writers() {
		info, ok, err := build.ReadScaleInfo(dataDir, reg.Job)
		if err != nil || ok {
			if err != nil {
				return nil, err
			}
			if !info.Dynamic {
				return newTableScale(info.Job, info.Instance, info.Instances, t.Schema().Buckets), nil
			}
			held, err := heldBuckets(t)
			return &tableScale{Job: info.Job, Instance: info.Instance, Buckets: held, Of: t.Schema().Buckets,
				Ownership: string(pipelines.OwnershipGroup)}, err
		}
	}
	return nil, nil
}

// heldBuckets returns the buckets of t that hold rows: under dynamic
// ownership, those its instance owned at its stop (it empties the others).
func heldBuckets(t *aggmerge.Table) ([]int, error) {
	errHeld := errors.New("held")
	var held []int
	for b := range t.Schema().Buckets {
		err := t.ScanBucket(b, func([]byte, aggmerge.Row) error { return errHeld })
		switch {
		case errors.Is(err, errHeld):
			held = append(held, b)
		case err != nil:
			return nil, err
		}
	}
	return held, nil
}

// readScaledTimeout bounds a whole-table read from the changelog.
const readScaledTimeout = time.Minute

// sharedNote is what table scan --all says of the rows it prints: the
// version each instance was read at.
func sharedNote(table string, versions []string) string {
	at := make([]string, len(versions))
	for i, v := range versions {
		at[i] = fmt.Sprintf("instance %d at version %s", i, v)
	}
	return fmt.Sprintf("runner: table %q whole, every instance's buckets, from its changelog: %s", table, strings.Join(at, ", "))
}

func versionNumbers(vs []export.Version) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprint(v.Version)
	}
	return out
}

// sharedCells calls fn with the cells of every row of a table read from
// its changelog, sorted by primary key (its JSON): the values as the
// changelog writes them, a column it lacks null.
func sharedCells(cols []string, rows map[string]kafka.Row, fn func([]string) error) error {
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = "null"
			if v, ok := rows[k].Get(c); ok {
				cells[i] = string(v.AppendJSON(nil))
			}
		}
		if err := fn(cells); err != nil {
			return err
		}
	}
	return nil
}

// apiAllRows writes the whole table of a scaled job (GET
// /api/v1/tables/{name}/rows?all=true) from its changelog, one JSON object
// per line, with the instances' versions in the header
// Ebbflow-Versions: 502 when the changelog cannot be read, 409 when an
// instance has published no version yet. A table of no scaled job is
// whole here: its rows are written as without all.
func (r *runner) apiAllRows(w http.ResponseWriter, req *http.Request, t *aggmerge.Table) bool {
	name := req.PathValue("name")
	p, ok := build.ScaledWriter(r.pipelines(), name)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(req.Context(), readScaledTimeout)
	defer cancel()
	if p.Spec.Job.Scale.Ownership == pipelines.OwnershipGroup {
		err := readOwnerLog(ctx, r.env, p, r.env.Loaded(), func(t *aggmerge.Table) error {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set(sourceHeader, ownerLogSource)
			out := &jsonLines{w: w, cols: columns(t.Schema())}
			return readRows(t, "", out.row)
		})
		if err != nil {
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		}
		return true
	}
	s, err := r.env.ReadScaled(ctx, p)
	switch {
	case errors.Is(err, build.ErrNoChangelog):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return true
	case errors.Is(err, export.ErrNoVersion):
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return true
	case err != nil:
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return true
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set(versionsHeader, strings.Join(versionNumbers(s.Versions), ","))
	out := &jsonLines{w: w, cols: columns(t.Schema())}
	if err := sharedCells(out.cols, s.Rows, out.row); err != nil {
		r.log.Warn("table rows", "table", name, "err", err)
	}
	return true
}

// versionsHeader carries, with the whole table of a scaled job, the
// version each instance was read at, in instance order.
const versionsHeader = "Ebbflow-Versions"

// sourceHeader says, with the whole table of a scaled job with ownership
// group, that it was read from the owner log (ownerLogSource).
const (
	sourceHeader   = "Ebbflow-Source"
	ownerLogSource = "owner-log"
)

// ownerLogNote is what table scan --all says of a table read from its
// owner log.
func ownerLogNote(table string) string {
	return fmt.Sprintf("runner: table %q whole, every bucket as its owner last published it, from its owner log", table)
}

// readOwnerLog reads the whole table of the scaled job p with ownership
// group, with the columns of the jobs among ps writing into it, from its
// owner log (build.Env.ReadOwnerLog) and calls fn with it.
func readOwnerLog(ctx context.Context, env *build.Env, p *pipelines.Pipeline, ps []*pipelines.Pipeline, fn func(*aggmerge.Table) error) error {
	t, closeTable, err := env.ReadOwnerLog(ctx, p, ps)
	if err != nil {
		return err
	}
	return errors.Join(fn(t), closeTable())
}

// offlineAll reads the whole table of a scaled job of the job files from
// its changelog, with no runner: from any process that reaches the
// changelog's cluster. ok is false when no scaled job of the files writes
// the table.
func offlineAll(stderr io.Writer, f *tableFlags, out *rowWriter) (ok bool, err error) {
	p, ok := build.ScaledWriter(f.jobs, f.table)
	if !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), readScaledTimeout)
	defer cancel()
	env := build.NewEnv(build.Options{DataDir: f.dataDir})
	defer env.Close()
	if p.Spec.Job.Scale.Ownership == pipelines.OwnershipGroup {
		return true, readOwnerLog(ctx, env, p, f.jobs, func(t *aggmerge.Table) error {
			fmt.Fprintln(stderr, ownerLogNote(f.table))
			out.header(columns(t.Schema()))
			if err := readRows(t, "", out.row); err != nil {
				return err
			}
			return out.flush()
		})
	}
	s, err := env.ReadScaled(ctx, p)
	if errors.Is(err, build.ErrNoChangelog) {
		return true, usageErr("%v", err)
	}
	if err != nil {
		return true, err
	}
	fmt.Fprintln(stderr, sharedNote(f.table, versionNumbers(s.Versions)))
	spec := p.Tables[0].Spec
	cols := slices.Clone(spec.PrimaryKey)
	for _, c := range spec.Columns {
		cols = append(cols, c.Name)
	}
	out.header(cols)
	if err := sharedCells(cols, s.Rows, out.row); err != nil {
		return true, err
	}
	return true, out.flush()
}
