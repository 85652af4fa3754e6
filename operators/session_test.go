package operators_test

import (
	"cmp"
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/chaos"
	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
)

const (
	sessionCount = 20_000
	sessionKeys  = 4
	sessionGap   = 700 * time.Microsecond
)

// sessionTimes is a random input for session windows: record seq of key
// seq%4 at about seq*100µs plus a jitter of up to 2ms (within the source's
// bound: no record is late), so a key's records are 400µs apart on
// average, some a gap or more apart, and arrive out of order: a late
// arrival often bridges two sessions.
func sessionTimes(seed int64) []int64 {
	rng := rand.New(rand.NewSource(seed))
	base := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC).UnixNano()
	times := make([]int64, sessionCount)
	for seq := range times {
		times[seq] = base + int64(seq)*int64(100*time.Microsecond) + rng.Int63n(int64(2*time.Millisecond))
	}
	return times
}

// sessionRow is a session of a key with the count and sum of its records.
type sessionRow struct {
	Key        uint64
	Start, End int64
	N, Sum     int64
}

// sessionModel splits each key's sorted times where two are a gap or more
// apart.
func sessionModel(times []int64) []sessionRow {
	byKey := map[uint64][]int{}
	for seq := range times {
		byKey[uint64(seq%sessionKeys)] = append(byKey[uint64(seq%sessionKeys)], seq)
	}
	var out []sessionRow
	for key, seqs := range byKey {
		slices.SortFunc(seqs, func(a, b int) int { return cmp.Compare(times[a], times[b]) })
		for i, seq := range seqs {
			if i == 0 || times[seq]-times[seqs[i-1]] >= int64(sessionGap) {
				out = append(out, sessionRow{Key: key, Start: times[seq]})
			}
			r := &out[len(out)-1]
			r.End, r.N, r.Sum = times[seq]+int64(sessionGap), r.N+1, r.Sum+operators.ValueOf(uint64(seq))
		}
	}
	return sortSessions(out)
}

func sortSessions(rows []sessionRow) []sessionRow {
	slices.SortFunc(rows, func(a, b sessionRow) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Start, b.Start))
	})
	return rows
}

type sessionAcc struct{ N, Sum int64 }

type sessionOut = operators.SessionEvent[uint64, operators.Event, sessionAcc]

// runSessions runs sequence → SessionWindows (by key) → exactly-once
// collect sink, with faults restarting the job from its checkpoints when f
// is not nil, and returns the sessions the committed events describe: the
// final ones, or, for updates, the events applied in order (a clear
// removes a session, the others add to it). merges counts the merges of
// two or more sessions.
func runSessions(t *testing.T, times []int64, final bool, par int, f *chaos.Faults, merges *atomic.Int64) []sessionRow {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	seq := operators.NewSequence(operators.SequenceConfig{Count: sessionCount, Splits: 8, Keys: sessionKeys,
		EventTime: func(seq uint64) int64 { return times[seq] }, MaxOutOfOrderness: 2 * time.Millisecond})
	j := runtime.NewJob(chaos.JobOptions("sessions", dir, f))
	src := chaos.Source(j, "sequence", seq, par, 1000/par, f)
	ks := runtime.KeyBy(src, func(e operators.Event) uint64 { return e.Seq % sessionKeys }, state.Uint64Codec{})
	sessions, err := operators.SessionWindows(ks, "sessions", operators.SessionConfig[operators.Event, sessionAcc]{
		Gap: sessionGap, Final: final,
		EventTime: func(e operators.Event) int64 { return e.Time },
		Partial:   func(e operators.Event) (sessionAcc, error) { return sessionAcc{1, e.Value}, nil },
		Combine: func(a, b sessionAcc) (sessionAcc, error) {
			if a.N > 1 && b.N > 1 {
				merges.Add(1)
			}
			return sessionAcc{a.N + b.N, a.Sum + b.Sum}, nil
		},
		Codec: state.JSONCodec[sessionAcc]{},
	}, runtime.WithParallelism(par+1))
	if err != nil {
		t.Fatal(err)
	}
	codec := state.Codec[sessionOut](state.JSONCodec[sessionOut]{})
	runtime.SinkTo(sessions, "collect", chaos.Sinks(operators.NewCollectSink(out, codec), f))
	if err := j.Run(t.Context()); err != nil {
		t.Fatalf("run: %v", err)
	}
	evs, err := operators.ReadCommitted(out, codec)
	if err != nil {
		t.Fatal(err)
	}
	type sk struct {
		key uint64
		s   watermark.Session
	}
	rows := map[sk]sessionRow{}
	for _, e := range evs {
		k := sk{e.Key, e.Session}
		r, ok := rows[k]
		switch {
		case e.Late != nil:
			t.Fatalf("a late record: %v", e.Late)
		case final && ok:
			t.Fatalf("session %v emitted twice", k)
		case e.Clear && !ok:
			t.Fatalf("session %v cleared before it was written", k)
		case e.Clear:
			delete(rows, k)
			continue
		}
		rows[k] = sessionRow{Key: e.Key, Start: e.Session.Start, End: e.Session.End, N: r.N + e.Acc.N, Sum: r.Sum + e.Acc.Sum}
	}
	var got []sessionRow
	for _, r := range rows {
		got = append(got, r)
	}
	return sortSessions(got)
}

// TestSessionWindowsOracle: the sessions of the Go API, final and
// updates, equal a plain model of a random out-of-order input, exactly
// once, uninterrupted and with faults restarting the job from its
// checkpoints (the open sessions and their timers restored from keyed
// state); records that bridge two sessions merge them.
func TestSessionWindowsOracle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		final  bool
		par    int
		faults bool
	}{{"final/p=2", true, 2, false}, {"final/p=2/faults", true, 2, true}, {"updates/p=1", false, 1, false}, {"updates/p=3/faults", false, 3, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := crashtest.Seed(t, *seedFlag)
			times := sessionTimes(s)
			want := sessionModel(times)
			if len(want) < sessionCount/20 || len(want) > sessionCount/3 {
				t.Fatalf("seed %d: the model has %d sessions of %d records: the input needs long and short ones", s, len(want), sessionCount)
			}
			var f *chaos.Faults
			if tc.faults {
				f = chaos.New(s, 3)
			}
			var merges atomic.Int64
			got := runSessions(t, times, tc.final, tc.par, f, &merges)
			if f != nil && f.Total() < tc.par {
				t.Fatalf("seed %d: only %d faults: the test proves nothing", s, f.Total())
			}
			if merges.Load() == 0 {
				t.Fatalf("seed %d: no record bridged two sessions", s)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d: %d sessions, want %d; %s", s, len(got), len(want), firstSessionDiff(got, want))
			}
			if f != nil {
				t.Logf("seed %d: %d faults injected", s, f.Total())
			}
			t.Logf("seed %d: %d sessions, %d merges of sessions", s, len(want), merges.Load())
		})
	}
}

func firstSessionDiff(got, want []sessionRow) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	return "one is a prefix of the other"
}
