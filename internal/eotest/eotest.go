// Package eotest holds the exactly-once test job shared by the in-process
// and the process-level crash tests: a sequence source, a keyed running sum
// and the two-phase collecting sink, and the oracle that checks the
// committed output against the exact answer.
package eotest

import (
	"fmt"
	"sort"

	"github.com/ebbflow/ebbflow/internal/chaos"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// Config shapes the test job.
type Config struct {
	Count       uint64  // records in the sequence
	Keys        uint64  // distinct keys
	Parallelism int     // of every operator
	Rate        float64 // per source subtask, records/s (0: unlimited)
	// PerCheckpoint, if set, limits each source subtask to this many
	// records between its barriers (chaos.PerCheckpoint): the input then
	// takes a number of checkpoints set by Count, whatever the machine.
	PerCheckpoint int
	// WrapSource, if set, wraps the sequence source (a stall).
	WrapSource func(func() runtime.Source[operators.Event]) func() runtime.Source[operators.Event]
	// Wrap, if set, adds operators between the source and the keyBy (fault
	// injection).
	Wrap func(runtime.Stream[operators.Event]) runtime.Stream[operators.Event]
	// WrapSink, if set, wraps the collecting sink (fault injection).
	WrapSink func(runtime.Sink[operators.Event]) runtime.Sink[operators.Event]
}

// Codec encodes Events in the sink's files.
var Codec state.Codec[operators.Event] = state.JSONCodec[operators.Event]{}

// Build adds the test pipeline to j: sequence → keyBy(key) → running sum →
// collecting sink in outDir. Every output carries the Seq of the record
// that produced it and the key's running sum after it.
func Build(j *runtime.Job, cfg Config, outDir string) {
	seq := operators.NewSequence(operators.SequenceConfig{Count: cfg.Count, Keys: cfg.Keys, Rate: cfg.Rate})
	if cfg.PerCheckpoint > 0 {
		seq = chaos.PerCheckpoint(seq, cfg.PerCheckpoint)
	}
	if cfg.WrapSource != nil {
		seq = cfg.WrapSource(seq)
	}
	src := runtime.FromSource(j, "sequence", seq, runtime.WithParallelism(cfg.Parallelism))
	if cfg.Wrap != nil {
		src = cfg.Wrap(src)
	}
	keyed := runtime.KeyBy(src, func(e operators.Event) uint64 { return e.Key }, nil)
	sums := runtime.Reduce(keyed, "running-sum", func(acc, v operators.Event) operators.Event {
		v.Value += acc.Value
		return v
	}, nil, runtime.WithParallelism(cfg.Parallelism))
	sink := operators.NewCollectSink(outDir, Codec)
	if cfg.WrapSink != nil {
		inner := sink
		sink = func() runtime.Sink[operators.Event] { return cfg.WrapSink(inner()) }
	}
	runtime.SinkTo(sums, "collect", sink, runtime.WithParallelism(cfg.Parallelism))
}

// Check compares the committed output in outDir with the exact answer for
// count records over keys: every Seq exactly once, and per key the running
// sums step by exactly the value of each record (a record counted twice in
// state, or lost, breaks a step).
func Check(outDir string, count, keys uint64) error {
	got, err := operators.ReadCommitted(outDir, Codec)
	if err != nil {
		return err
	}
	return CheckOutputs(got, count, keys)
}

// CheckOutputs is Check on outputs already read.
func CheckOutputs(got []operators.Event, count, keys uint64) error {
	seen := make([]uint32, count)
	byKey := map[uint64][]operators.Event{}
	var errs []string
	for _, e := range got {
		if e.Seq >= count {
			errs = append(errs, fmt.Sprintf("output for seq %d beyond the input", e.Seq))
			continue
		}
		seen[e.Seq]++
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	dups, missing := 0, 0
	for seq, n := range seen {
		switch {
		case n > 1:
			if dups < 5 {
				errs = append(errs, fmt.Sprintf("seq %d committed %d times", seq, n))
			}
			dups++
		case n == 0:
			if missing < 5 {
				errs = append(errs, fmt.Sprintf("seq %d never committed", seq))
			}
			missing++
		}
	}
	badSteps := 0
	for key, es := range byKey {
		sort.Slice(es, func(a, b int) bool { return es[a].Value < es[b].Value })
		prev := int64(0)
		for _, e := range es {
			if e.Key != operators.KeyOf(e.Seq, keys) {
				errs = append(errs, fmt.Sprintf("seq %d under key %d, want %d", e.Seq, e.Key, operators.KeyOf(e.Seq, keys)))
			}
			if step := e.Value - prev; step != operators.ValueOf(e.Seq) {
				if badSteps < 5 {
					errs = append(errs, fmt.Sprintf("key %d: running sum went %d -> %d at seq %d, want a step of %d",
						key, prev, e.Value, e.Seq, operators.ValueOf(e.Seq)))
				}
				badSteps++
			}
			prev = e.Value
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("exactly-once violated: %d outputs, %d duplicated seqs, %d missing seqs, %d wrong steps; first: %v",
		len(got), dups, missing, badSteps, errs)
}
