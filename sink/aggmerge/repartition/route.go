package repartition

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// ErrColumns marks a repartition record that stage 2 refuses: of a job
// that writes no columns of the table here, or carrying columns that are
// not exactly its job's. The source's on_error decides what happens to it.
var ErrColumns = errors.New("repartition: the row's job does not own its columns")

// Partial is a repartition record decoded for stage 2: its row, and which
// of the Router's writers applies it.
type Partial struct {
	Writer int
	Row    writer.Row
}

// JobWriter is one job's writer of the table in stage 2: the job's rows
// (its Codec) are applied by an exactly-once writer named Sink, whose ids
// are "<job>/<Sink>#<subtask>" and whose registration is the job's, for the
// codec's columns (Config's Columns, Job and Sink are set from them).
type JobWriter struct {
	Codec  *Codec
	Sink   string
	Config writer.Config
}

// Group is the writer group of w's subtasks: "<job>/<Sink>".
func (w JobWriter) Group() string { return w.Codec.Job() + "/" + w.Sink }

// Router routes stage 2's records to the writers of the jobs that write
// the table through the hop (docs/SCALING.md, "Independent jobs on one
// table"): writer 0 is the owner job's, which applies every record
// without headers (its stage 1 sends none, as it did before tables could
// be shared through the hop); each
// other job's rows go to its own writer, registered for that job and its
// columns, so the table's registry refuses columns that overlap another
// job's (aggmerge.ErrColumnConflict), and the writers undo and fence each
// its own writes as jobs sharing a table in one process do. A record of
// an unknown job, or whose columns are not exactly its job's, is refused
// (ErrColumns) and counted.
type Router struct {
	writers []JobWriter
	metrics *Metrics
}

// NewRouter returns the router of writers, the owner job's first. metrics
// (may be nil) counts the records refused.
func NewRouter(metrics *Metrics, writers ...JobWriter) (*Router, error) {
	if len(writers) == 0 {
		return nil, errors.New("repartition: a router needs the owner job's writer")
	}
	r := &Router{metrics: metrics}
	for i, w := range writers {
		if slices.ContainsFunc(writers[:i], func(o JobWriter) bool { return o.Codec.Job() == w.Codec.Job() }) {
			return nil, fmt.Errorf("repartition: job %q writes the table twice", w.Codec.Job())
		}
		if w.Codec.table != writers[0].Codec.table {
			return nil, fmt.Errorf("repartition: job %q writes another table than job %q", w.Codec.Job(), writers[0].Codec.Job())
		}
		w.Config.Job, w.Config.Sink, w.Config.Columns = w.Codec.Job(), w.Sink, w.Codec.Columns()
		r.writers = append(r.writers, w)
	}
	return r, nil
}

// Owner returns the codec of the owner job's rows.
func (r *Router) Owner() *Codec { return r.writers[0].Codec }

// Groups returns the writer groups of stage 2 and their columns, for the
// Publishers.
func (r *Router) Groups() []WriterGroup {
	out := make([]WriterGroup, len(r.writers))
	for i, w := range r.writers {
		out[i] = WriterGroup{Group: w.Group(), Columns: w.Codec.Columns()}
	}
	return out
}

// Decode decodes a repartition record into p, reusing p.Row's slices.
func (r *Router) Decode(rec *kgo.Record, p *Partial) error {
	i, err := r.writerOf(rec.Headers)
	if err != nil {
		r.metrics.refuse()
		return err
	}
	p.Writer = i
	return r.writers[i].Codec.Decode(rec.Key, rec.Value, &p.Row)
}

// writerOf returns the writer of a record with headers hs.
func (r *Router) writerOf(hs []kgo.RecordHeader) (int, error) {
	var job, cols []byte
	var has bool
	for _, h := range hs {
		switch h.Key {
		case HeaderJob:
			job, has = h.Value, true
		case HeaderColumns:
			cols = h.Value
		}
	}
	if !has {
		return 0, nil
	}
	i := slices.IndexFunc(r.writers, func(w JobWriter) bool { return w.Codec.Job() == string(job) })
	if i < 0 {
		return 0, fmt.Errorf("%w: a row of job %q, which writes no column of the table here (its jobs: %v)", ErrColumns, job, r.jobs())
	}
	if !bytes.Equal(cols, r.writers[i].Codec.header) {
		return 0, r.foreign(i, cols)
	}
	return i, nil
}

// foreign explains why the columns cols are not writer i's.
func (r *Router) foreign(i int, cols []byte) error {
	job := r.writers[i].Codec.Job()
	for _, c := range bytes.Split(cols, []byte(",")) {
		for _, o := range r.writers {
			if o.Codec.Job() != job && slices.Contains(o.Codec.Columns(), string(c)) {
				return fmt.Errorf("%w: a row of job %q writes column %q, which is job %q's", ErrColumns, job, c, o.Codec.Job())
			}
		}
	}
	return fmt.Errorf("%w: a row of job %q carries columns [%s]; the job writes [%s] here", ErrColumns, job, cols, r.writers[i].Codec.header)
}

func (r *Router) jobs() []string {
	out := make([]string, len(r.writers))
	for i, w := range r.writers {
		out[i] = w.Codec.Job()
	}
	return out
}

// AddWriters adds stage 2's writers to the job reading rows: the rows of
// each writer (a filter "repartition-<job>") go to its exactly-once
// writer (writer.To). The owner job's writer is named by its Sink; the
// others' operators are "<Sink>@<job>". The owner job alone reads rows
// without a filter, in the graph of a job that shares its table with
// none.
func (r *Router) AddWriters(rows runtime.Stream[Partial]) error {
	if len(r.writers) == 1 {
		w := r.writers[0]
		return writer.To(rows, w.Sink, w.Config, partialMapper)
	}
	for i, w := range r.writers {
		name := w.Sink
		if i > 0 {
			name += "@" + w.Codec.Job()
		}
		mine := runtime.Filter(rows, "repartition-"+w.Codec.Job(), func(p Partial) bool { return p.Writer == i })
		if err := writer.To(mine, name, w.Config, partialMapper); err != nil {
			return fmt.Errorf("writer of job %q: %w", w.Codec.Job(), err)
		}
	}
	return nil
}

// partialMapper is the stage-2 writers' mapper of decoded rows.
func partialMapper(p Partial, row *writer.Row) error {
	row.Kind = p.Row.Kind
	row.Key = append(row.Key[:0], p.Row.Key...)
	row.Vals = append(row.Vals[:0], p.Row.Vals...)
	return nil
}
