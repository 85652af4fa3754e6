package statetest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
)

// avg is an AggregateFunction computing the mean of int64 inputs.
type avg struct{}

type avgAcc struct{ Sum, N int64 }

func (avg) CreateAccumulator() avgAcc                 { return avgAcc{} }
func (avg) Add(a avgAcc, in int64) avgAcc             { return avgAcc{a.Sum + in, a.N + 1} }
func (avg) Result(a avgAcc) float64                   { return float64(a.Sum) / float64(a.N) }
func sum(a, b int64) int64                            { return a + b }
func cloneMap[K comparable, V any](m map[K]V) map[K]V { return maps.Clone(m) }

// model is the expected content of every state: plain Go maps.
type model struct {
	vals map[string]int64
	sums map[string]int64
	avgs map[int64]avgAcc
	lsts map[string][]string
	mps  map[string]map[string]int64
}

func newModel() *model {
	return &model{map[string]int64{}, map[string]int64{}, map[int64]avgAcc{}, map[string][]string{}, map[string]map[string]int64{}}
}

func (m *model) clone() *model {
	c := &model{cloneMap(m.vals), cloneMap(m.sums), cloneMap(m.avgs), map[string][]string{}, map[string]map[string]int64{}}
	for k, v := range m.lsts {
		c.lsts[k] = slices.Clone(v)
	}
	for k, v := range m.mps {
		c.mps[k] = cloneMap(v)
	}
	return c
}

// states are the typed states under test, registered on one Keyed.
type states struct {
	vals *state.Value[string, int64]
	sums *state.Reducing[string, int64]
	avgs *state.Aggregating[int64, int64, avgAcc, float64]
	lsts *state.List[string, string]
	mps  *state.Map[string, string, int64]
}

func register(kd *state.Keyed) *states {
	sc, ic := state.CodecFor[string](), state.CodecFor[int64]()
	return &states{
		vals: state.NewValue(kd, "vals", sc, ic),
		sums: state.NewReducing(kd, "sums", sc, ic, sum),
		avgs: state.NewAggregating(kd, "avgs", ic, state.CodecFor[avgAcc](), state.AggregateFunction[int64, avgAcc, float64](avg{})),
		lsts: state.NewList(kd, "lsts", sc, sc),
		mps:  state.NewMap(kd, "mps", sc, sc, ic),
	}
}

const (
	modelKeys     = 60
	modelUserKeys = 8
	modelCache    = 64
)

// testModel applies random operations to the typed states and to a model,
// with flushes, checkpoints and restores (to the last checkpoint, dropping
// what came after it) in between, and compares them after every read and
// every restore. The cache is small, so entries are evicted all the time.
func testModel(t *testing.T, f state.BackendFactory) {
	seed := uint64(time.Now().UnixNano())
	if env := os.Getenv("STATETEST_SEED"); env != "" {
		var err error
		if seed, err = strconv.ParseUint(env, 10, 64); err != nil {
			t.Fatalf("STATETEST_SEED: %v", err)
		}
	}
	t.Logf("seed %d (set STATETEST_SEED to repeat)", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	h := newHarness(t, f, state.DefaultMaxParallelism, modelCache)
	sub := h.open(1, 0, nil)
	defer func() { sub.close(t) }()
	st := register(sub.kd)
	m := newModel()
	var (
		lastMD    *state.Metadata
		lastModel = newModel()
		id        barrier.CheckpointID
	)
	ops := 3000
	if testing.Short() {
		ops = 800
	}
	for n := range ops {
		key := fmt.Sprintf("k%d", r.IntN(modelKeys))
		uk := fmt.Sprintf("u%d", r.IntN(modelUserKeys))
		v := r.Int64N(1000) - 500
		where := fmt.Sprintf("seed %d op %d", seed, n)
		switch op := r.IntN(100); {
		case op < 12:
			must(t, where, st.vals.Put(key, v))
			m.vals[key] = v
		case op < 16:
			must(t, where, st.vals.Delete(key))
			delete(m.vals, key)
		case op < 26:
			must(t, where, st.sums.Add(key, v))
			m.sums[key] += v
		case op < 28:
			must(t, where, st.sums.Clear(key))
			delete(m.sums, key)
		case op < 36:
			k := int64(r.IntN(modelKeys))
			must(t, where, st.avgs.Add(k, v))
			a := m.avgs[k]
			m.avgs[k] = avgAcc{a.Sum + v, a.N + 1}
		case op < 38:
			k := int64(r.IntN(modelKeys))
			must(t, where, st.avgs.Clear(k))
			delete(m.avgs, k)
		case op < 46:
			must(t, where, st.lsts.Add(key, uk))
			m.lsts[key] = append(m.lsts[key], uk)
		case op < 48:
			must(t, where, st.lsts.Clear(key))
			delete(m.lsts, key)
		case op < 60:
			must(t, where, st.mps.Put(key, uk, v))
			if m.mps[key] == nil {
				m.mps[key] = map[string]int64{}
			}
			m.mps[key][uk] = v
		case op < 66:
			must(t, where, st.mps.Delete(key, uk))
			delete(m.mps[key], uk)
		case op < 67:
			must(t, where, st.mps.Clear(key))
			delete(m.mps, key)
		case op < 90:
			checkKey(t, where, st, m, key, int64(r.IntN(modelKeys)))
		case op < 94:
			must(t, where, sub.kd.Flush())
		case op < 98:
			id++
			md := h.checkpoint(id, sub)
			lastMD, lastModel = &md, m.clone()
		default:
			sub.close(t)
			sub = h.open(1, 0, lastMD)
			st = register(sub.kd)
			m = lastModel.clone()
			checkAll(t, where+" after restore", st, m)
		}
		if got := sub.kd.CachedEntries(); got > modelCache {
			t.Fatalf("%s: %d cached entries, bound %d", where, got, modelCache)
		}
	}
	checkAll(t, fmt.Sprintf("seed %d end", seed), st, m)
}

func must(t *testing.T, where string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

func checkAll(t *testing.T, where string, st *states, m *model) {
	t.Helper()
	for i := range modelKeys {
		checkKey(t, where, st, m, fmt.Sprintf("k%d", i), int64(i))
	}
}

// checkKey compares every state of key (and of ik, the aggregating state's
// key) with the model.
func checkKey(t *testing.T, where string, st *states, m *model, key string, ik int64) {
	t.Helper()
	v, ok, err := st.vals.Get(key)
	want, wantOK := m.vals[key]
	if err != nil || ok != wantOK || v != want {
		t.Fatalf("%s: vals[%s] = %d, %v, %v; want %d, %v", where, key, v, ok, err, want, wantOK)
	}
	v, ok, err = st.sums.Get(key)
	want, wantOK = m.sums[key]
	if err != nil || ok != wantOK || v != want {
		t.Fatalf("%s: sums[%s] = %d, %v, %v; want %d, %v", where, key, v, ok, err, want, wantOK)
	}
	a, ok, err := st.avgs.Get(ik)
	wantAcc, wantOK := m.avgs[ik]
	if err != nil || ok != wantOK || (ok && a != avg{}.Result(wantAcc)) {
		t.Fatalf("%s: avgs[%d] = %v, %v, %v; want %v, %v", where, ik, a, ok, err, wantAcc, wantOK)
	}
	l, err := st.lsts.Get(key)
	if err != nil || !slices.Equal(l, m.lsts[key]) {
		t.Fatalf("%s: lsts[%s] = %q, %v; want %q", where, key, l, err, m.lsts[key])
	}
	got := map[string]int64{}
	err = st.mps.Range(key, func(uk string, v int64) bool { got[uk] = v; return true })
	if err != nil || !maps.Equal(got, m.mps[key]) {
		t.Fatalf("%s: mps[%s] = %v, %v; want %v", where, key, got, err, m.mps[key])
	}
	for uk, want := range m.mps[key] {
		if v, ok, err := st.mps.Get(key, uk); err != nil || !ok || v != want {
			t.Fatalf("%s: mps[%s][%s] = %d, %v, %v; want %d", where, key, uk, v, ok, err, want)
		}
	}
	if n, err := st.mps.Len(key); err != nil || n != len(m.mps[key]) {
		t.Fatalf("%s: len(mps[%s]) = %d, %v; want %d", where, key, n, err, len(m.mps[key]))
	}
}
