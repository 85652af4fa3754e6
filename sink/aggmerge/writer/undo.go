package writer

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// undoPlan is what undoing one bucket writes: for each key the sink changed
// past the baseline, the values its columns had at the baseline.
type undoPlan struct {
	bucket   int
	from, to uint64 // the undone range [baseline, captured end)
	scanned  int    // log entries read
	keys     [][]agg.Value
	vals     [][]agg.Value // the sink's columns; all null for rows it created
}

// planUndo scans bucket's log from baseline to end and keeps, for each key,
// the first entry written by a writer of group, the sink's "<job>/<sink>"
// (any subtask and epoch of it). cols are the sink's value columns (table
// indexes).
func planUndo(t *aggmerge.Table, bucket int, baseline, end uint64, group string, cols []int) (undoPlan, error) {
	p := undoPlan{bucket: bucket, from: baseline, to: end}
	if baseline == end {
		return p, nil
	}
	seen := map[string]bool{}
	var k []byte
	stop := errors.New("end reached")
	err := t.ReadLog(bucket, baseline, func(e *aggmerge.Entry) error {
		if e.Offset >= end {
			return stop
		}
		p.scanned++
		// A +U comes right after its -U, which decided already (unless the
		// range starts between them).
		skip := e.Op == aggmerge.MarkerEntry || e.Op == aggmerge.UpdateAfter && e.Offset > baseline
		if skip || !ofGroup(e.Writer.ID, group) {
			return nil
		}
		var err error
		if k, err = t.AppendKey(k[:0], e.Key); err != nil {
			return err
		}
		if seen[string(k)] {
			return nil
		}
		seen[string(k)] = true
		vals := make([]agg.Value, len(cols))
		if e.Before != nil { // nil: the row did not exist, its columns clear
			for i, c := range cols {
				vals[i] = e.Before[c]
			}
		}
		p.keys = append(p.keys, slices.Clone(e.Key))
		p.vals = append(p.vals, vals)
		return nil
	})
	if err != nil && !errors.Is(err, stop) {
		return p, err
	}
	return p, nil
}

// undoChunk bounds the writes of one undo batch.
const undoChunk = 1000

// applyUndo writes the plan in OVERWRITE mode as undo entries, then the
// rollback marker naming the undone range and the restored checkpoint.
func applyUndo(t *aggmerge.Table, w aggmerge.Writer, columns []string, p undoPlan, checkpoint uint64) error {
	b, err := t.NewBatch(w, columns)
	if err != nil {
		return err
	}
	b.SetUndo(true)
	for i := range p.keys {
		if err := b.Upsert(aggmerge.Overwrite, p.keys[i], p.vals[i]); err != nil {
			return fmt.Errorf("undo key %v: %w", p.keys[i], err)
		}
		if b.Len() >= undoChunk {
			if _, err := t.Apply(b); err != nil {
				return err
			}
			b.Reset()
		}
	}
	err = b.Mark(p.bucket, aggmerge.Marker{Kind: aggmerge.MarkerRollback, Checkpoint: checkpoint, From: p.from, To: p.to})
	if err != nil {
		return err
	}
	_, err = t.Apply(b)
	return err
}
