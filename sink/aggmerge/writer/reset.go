package writer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// writersOf returns the registrations of the writers of sink's group (any
// subtask and parallelism): those of its job whose ids parse as the
// group's.
func writersOf(t *aggmerge.Table, sink base.WriterID) []aggmerge.Registration {
	group := sink.Group()
	var out []aggmerge.Registration
	for _, r := range t.Writers() {
		if id, err := base.ParseWriterID(r.Writer); err == nil && r.Job == sink.Job && id.Group() == group {
			out = append(out, r)
		}
	}
	return out
}

// ofGroup reports whether a log entry's writer id is of group, a sink's
// "<job>/<sink>": written by any subtask, at any parallelism, of the sink.
func ofGroup(id, group string) bool {
	g, ok := base.GroupOf(id)
	return ok && g == group
}

// lostState returns the refusal of a start without state when writers of
// the sink have written to the table, else nil.
func lostState(t *aggmerge.Table, sink base.WriterID) *LostStateError {
	var lost *LostStateError
	for _, r := range writersOf(t, sink) {
		if !r.Wrote {
			continue
		}
		if lost == nil {
			lost = &LostStateError{Table: t.Dir(), Job: sink.Job, Sink: sink.Group()}
		}
		lost.Writers = append(lost.Writers, r.Writer)
		if r.Committed && (!lost.Committed || r.Checkpoint > lost.Checkpoint) {
			lost.Committed, lost.Checkpoint = true, r.Checkpoint
		}
	}
	return lost
}

// ResetResult is what Reset did.
type ResetResult struct {
	Writers []string // the sink's writers whose writes were taken back
	Rows    int      // rows whose columns of the sink were cleared
}

// Reset takes back everything sink <job>/<name> ever wrote to t, so that
// the sink can start afresh (no checkpoint) and its input count once: in
// every row, the columns its writers registered are cleared, and a row left
// with no value is deleted; the other writers' columns keep their values.
// It needs no log (which may be truncated): the sink owns its columns, so
// their values are all its own. The clears are undo entries in OVERWRITE
// mode, one rollback marker per bucket after them, so the changelog shows
// them as updates and deletes, and discards what the sink wrote past its
// last commit. Then the writers are recorded as not having written
// (Table.ForgetWrites); they stay registered, with a newer epoch that
// fences any of them still running. Reset is idempotent: after a crash,
// run it again. Call it while the sink's job does not run.
func Reset(t *aggmerge.Table, job, name string) (ResetResult, error) {
	var res ResetResult
	regs := writersOf(t, base.WriterID{Job: job, Sink: name})
	done := map[string]bool{} // column sets cleared
	for _, r := range regs {
		res.Writers = append(res.Writers, r.Writer)
		epoch, err := t.Register(job, r.Writer, r.Columns)
		if err != nil {
			return res, fmt.Errorf("reset sink %s/%s of table %s: %w", job, name, t.Dir(), err)
		}
		set := strings.Join(r.Columns, ",")
		if done[set] {
			continue
		}
		done[set] = true
		n, err := clearColumns(t, aggmerge.Writer{ID: r.Writer, Epoch: epoch}, r.Columns)
		res.Rows += n
		if err != nil {
			return res, fmt.Errorf("reset sink %s/%s of table %s: %w", job, name, t.Dir(), err)
		}
	}
	if err := t.Sync(); err != nil {
		return res, fmt.Errorf("reset sink %s/%s of table %s: %w", job, name, t.Dir(), err)
	}
	for _, r := range regs {
		if err := t.ForgetWrites(r.Writer); err != nil {
			return res, fmt.Errorf("reset sink %s/%s of table %s: %w", job, name, t.Dir(), err)
		}
	}
	return res, nil
}

// clearColumns clears the given columns (empty: all) in every row of t, as
// w, bucket by bucket: rows without a value in them are left alone, every
// bucket gets its rollback marker over the whole log below the clears. It
// returns the rows cleared.
func clearColumns(t *aggmerge.Table, w aggmerge.Writer, columns []string) (int, error) {
	cfg := Config{Table: t, Columns: columns}
	cols := cfg.columnIndexes()
	nulls := make([]agg.Value, len(cols))
	ends := t.LogEnds() // nothing else writes meanwhile
	rows := 0
	// p is the plan of the bucket being scanned (the scan goes bucket by
	// bucket); finish applies the plans of every bucket below b.
	p := undoPlan{bucket: 0, to: ends[0]}
	finish := func(b int) error {
		for p.bucket < b {
			if err := applyUndo(t, w, columns, p, 0); err != nil {
				return fmt.Errorf("bucket %d: %w", p.bucket, err)
			}
			rows += len(p.keys)
			next := p.bucket + 1
			p = undoPlan{bucket: next}
			if next < len(ends) {
				p.to = ends[next]
			}
		}
		return nil
	}
	err := t.Scan(func(r aggmerge.Row) error {
		if !slices.ContainsFunc(cols, func(c int) bool { return !r.Values[c].IsNull() }) {
			return nil
		}
		b, err := t.Bucket(r.Key)
		if err != nil {
			return err
		}
		if err := finish(b); err != nil {
			return err
		}
		p.keys = append(p.keys, slices.Clone(r.Key))
		p.vals = append(p.vals, nulls)
		return nil
	})
	if err == nil {
		err = finish(len(ends))
	}
	return rows, err
}
