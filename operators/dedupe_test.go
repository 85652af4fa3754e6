package operators_test

import (
	"flag"
	"math/rand"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/chaos"
	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

var seedFlag = flag.Int64("seed", 0, "seed of the randomized dedupe tests (0: from the clock)")

const (
	dedupeCount  = 20_000
	dedupeSplits = 8
	dedupeWithin = 3 * time.Millisecond
)

// dedupeInput is a random input with duplicates: per sequence number an id
// and an event time. An id lives in one split (id mod 8 = seq mod 8), so
// its records reach the dedupe step in sequence order whatever the
// parallelism; 40% of records repeat the id of one of the five before them
// in their split, 0.8 to 4 ms earlier give or take a jitter of up to 2 ms,
// so some repeats are within the 3 ms horizon and some are not. No record
// is late: the jitter is within the source's bound.
type dedupeInput struct {
	ids   []uint64
	times []int64
}

func newDedupeInput(seed int64) *dedupeInput {
	rng := rand.New(rand.NewSource(seed))
	in := &dedupeInput{ids: make([]uint64, dedupeCount), times: make([]int64, dedupeCount)}
	base := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC).UnixNano()
	for seq := range uint64(dedupeCount) {
		in.times[seq] = base + int64(seq)*int64(100*time.Microsecond) + rng.Int63n(int64(2*time.Millisecond))
		if seq >= 5*dedupeSplits && rng.Float64() < 0.4 {
			in.ids[seq] = in.ids[seq-dedupeSplits*uint64(1+rng.Intn(5))]
		} else {
			in.ids[seq] = uint64(rng.Int63n(1<<40))*dedupeSplits + seq%dedupeSplits
		}
	}
	return in
}

// model returns the sequence numbers the dedupe keeps: in sequence order,
// a record is dropped when a kept record of its id is less than the horizon
// away in event time.
func (in *dedupeInput) model() []uint64 {
	kept := map[uint64][]int64{}
	var out []uint64
	for seq := range uint64(dedupeCount) {
		id, at := in.ids[seq], in.times[seq]
		dup := false
		for _, t := range kept[id] {
			if d := at - t; d < int64(dedupeWithin) && d > -int64(dedupeWithin) {
				dup = true
			}
		}
		if !dup {
			kept[id] = append(kept[id], at)
			out = append(out, seq)
		}
	}
	return out
}

// run runs sequence → dedupe (by id) → exactly-once collect sink, with
// faults restarting the job from its checkpoints when f is not nil, and
// returns the sequence numbers committed.
func (in *dedupeInput) run(t *testing.T, par int, f *chaos.Faults) []uint64 {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	seq := operators.NewSequence(operators.SequenceConfig{Count: dedupeCount, Splits: dedupeSplits,
		EventTime: func(seq uint64) int64 { return in.times[seq] }, MaxOutOfOrderness: 2 * time.Millisecond})
	j := runtime.NewJob(chaos.JobOptions("dedupe", dir, f))
	src := chaos.Source(j, "sequence", seq, par, 1000/par, f)
	ks := runtime.KeyBy(src, func(e operators.Event) uint64 { return in.ids[e.Seq] }, state.Uint64Codec{})
	kept, err := operators.Dedupe(ks, "dedupe", operators.DedupeConfig[operators.Event]{Within: dedupeWithin,
		EventTime: func(e operators.Event) int64 { return e.Time }}, runtime.WithParallelism(par+1))
	if err != nil {
		t.Fatal(err)
	}
	runtime.SinkTo(kept, "collect", chaos.Sinks(operators.NewCollectSink(out, state.Codec[operators.Event](state.JSONCodec[operators.Event]{})), f))
	if err := j.Run(t.Context()); err != nil {
		t.Fatalf("run: %v", err)
	}
	evs, err := operators.ReadCommitted(out, state.Codec[operators.Event](state.JSONCodec[operators.Event]{}))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]uint64, len(evs))
	for i, e := range evs {
		got[i] = e.Seq
	}
	slices.Sort(got)
	return got
}

// TestDedupeOracle: the records a dedupe step keeps from a random input
// with duplicates equal the model's, exactly once, uninterrupted and with
// faults restarting the job from its checkpoints (the kept ids and their
// timers restored from keyed state).
func TestDedupeOracle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		par    int
		faults bool
	}{{"p=2", 2, false}, {"p=1/faults", 1, true}, {"p=3/faults", 3, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := crashtest.Seed(t, *seedFlag)
			in := newDedupeInput(s)
			want := in.model()
			if len(want) == dedupeCount || len(want) < dedupeCount/2 {
				t.Fatalf("seed %d: the model keeps %d of %d: the input needs duplicates and singles", s, len(want), dedupeCount)
			}
			var f *chaos.Faults
			if tc.faults {
				f = chaos.New(s, 3)
			}
			got := in.run(t, tc.par, f)
			if f != nil {
				t.Logf("seed %d: %d faults injected", s, f.Total())
				if f.Total() < tc.par {
					t.Fatalf("seed %d: only %d faults: the test proves nothing", s, f.Total())
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d: kept %d records, want %d; first difference at %d", s, len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

func firstDiff(a, b []uint64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
