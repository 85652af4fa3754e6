package writer

import (
	"fmt"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/state"
)

// Pending reports what the undo at the next start of a sink would take
// back, were it restored from a checkpoint: per bucket, the number of keys
// the sink's writers changed past the checkpoint's baseline (the plan undo
// would make, computed without writing). op is the sink's snapshot in the
// checkpoint's metadata, job/sink the sink's name. No bucket in the result
// means the sink's columns in t hold exactly what the checkpoint covers.
func Pending(t *aggmerge.Table, job, sink string, op state.OperatorSnapshot) (map[int]int, error) {
	var items [][]byte
	for _, st := range op.Subtasks {
		items = append(items, st.Unions[stateList]...)
	}
	buckets := t.Schema().Buckets
	group := base.WriterID{Job: job, Sink: sink}.Group()
	baselines, err := mergeBaselines(items, t.Dir(), t.ID().String(), group, buckets)
	if err != nil {
		return nil, err
	}
	out := map[int]int{}
	for b := range buckets {
		_, end, err := t.LogOffsets(b)
		if err != nil {
			return nil, err
		}
		if baselines[b] > end {
			return nil, fmt.Errorf("table %s bucket %d: %w: baseline %d, log end %d", t.Dir(), b, aggmerge.ErrBeyondLogEnd, baselines[b], end)
		}
		if baselines[b] == end {
			continue
		}
		p, err := planUndo(t, b, baselines[b], end, group, nil)
		if err != nil {
			return nil, fmt.Errorf("table %s bucket %d from %d to %d: %w", t.Dir(), b, baselines[b], end, err)
		}
		if len(p.keys) > 0 {
			out[b] = len(p.keys)
		}
	}
	return out, nil
}
