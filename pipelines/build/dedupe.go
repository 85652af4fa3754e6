package build

import (
	"fmt"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
	"github.com/ebbflow/ebbflow/state"
)

// dedupe adds the job's dedupe step, if it has one, behind a shuffle by
// its key (the key fields encoded as a table key).
func dedupe(p *pipelines.Pipeline, in runtime.Stream[Row]) (runtime.Stream[Row], error) {
	d := p.Dedupe
	if d == nil {
		return in, nil
	}
	types := make([]agg.Type, len(d.Key))
	for i, f := range d.Key {
		types[i] = f.Type
	}
	// key runs on every upstream subtask at once: no buffer is shared.
	key := func(r Row) string {
		vals := make([]agg.Value, 0, len(d.Key))
		for _, f := range d.Key {
			v, _ := pipelines.AggValue(f.Type, r[f.Slot]) // checked by checkDedupe
			vals = append(vals, v)
		}
		k, _ := encoding.AppendKey(nil, types, vals)
		return string(k)
	}
	at := func(r Row) int64 {
		t, _ := eventTimeOf(r[d.On.Slot], d.On.Name) // checked by checkDedupe
		return t
	}
	return operators.Dedupe(runtime.KeyBy(in, key, state.StringCodec{}), "dedupe",
		operators.DedupeConfig[Row]{Within: d.Within, EventTime: at})
}

// checkDedupe finds, before the record reaches the dedupe step (where an
// error would fail the job whatever the policy), a null key or event time.
func checkDedupe(p *pipelines.Pipeline, r Row) error {
	d := p.Dedupe
	if d == nil {
		return nil
	}
	for _, f := range d.Key {
		if r[f.Slot] == nil {
			return fmt.Errorf("%w: dedupe: key field %s is null", pipelines.ErrEval, f.Name)
		}
	}
	if r[d.On.Slot] == nil {
		return fmt.Errorf("%w: dedupe: event time field %s is null", pipelines.ErrEval, d.On.Name)
	}
	return nil
}
