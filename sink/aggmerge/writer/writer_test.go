package writer_test

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/chaos"
	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

var seedFlag = flag.Int64("seed", 0, "seed of the randomized tests (0: from the clock)")

func seed(t *testing.T) int64 { return crashtest.Seed(t, *seedFlag) }

// keys is a multiple of the sequence's 8 splits, so every key's records come
// from one split, in seq order: last_value and listagg have one exact answer.
const keys = 64

func schema() aggmerge.Schema {
	i64 := agg.Type{Kind: agg.KindInt64}
	return aggmerge.Schema{
		Key: []aggmerge.Column{{Name: "k", Type: i64}},
		Values: []aggmerge.Column{
			{Name: "total", Type: i64, Func: "sum"},
			{Name: "n", Type: i64, Func: "count"},
			{Name: "top", Type: i64, Func: "max"},
			{Name: "last", Type: i64, Func: "last_value"},
			{Name: "seqs", Type: agg.Type{Kind: agg.KindString}, Func: "listagg"},
			{Name: "n2", Type: i64, Func: "count"},
		},
		Buckets: 8,
	}
}

func mapEvent(e operators.Event, r *writer.Row) error {
	r.Kind = runtime.RowInsert
	r.Key = append(r.Key[:0], agg.IntValue(int64(e.Seq%keys)))
	r.Vals = append(r.Vals[:0], agg.IntValue(e.Value), agg.IntValue(1), agg.IntValue(e.Value),
		agg.IntValue(int64(e.Seq)), agg.StringValue(strconv.FormatUint(e.Seq, 10)), agg.IntValue(1))
	return nil
}

// expected computes the exact table for the first count records.
func expected(count uint64) map[int64][]string {
	type acc struct {
		total, n, top, last int64
		seqs                []string
	}
	m := map[int64]*acc{}
	for seq := uint64(0); seq < count; seq++ {
		k := int64(seq % keys)
		a := m[k]
		if a == nil {
			a = &acc{}
			m[k] = a
		}
		v := operators.ValueOf(seq)
		a.total += v
		a.n++
		a.top = max(a.top, v)
		a.last = int64(seq)
		a.seqs = append(a.seqs, strconv.FormatUint(seq, 10))
	}
	out := map[int64][]string{}
	for k, a := range m {
		out[k] = []string{fmt.Sprint(a.total), fmt.Sprint(a.n), fmt.Sprint(a.top), fmt.Sprint(a.last), strings.Join(a.seqs, ","), fmt.Sprint(a.n)}
	}
	return out
}

// checkTable compares the table with the exact answer and with its log
// replayed from offset 0.
func checkTable(t *testing.T, tbl *aggmerge.Table, want map[int64][]string) {
	t.Helper()
	got := checkRows(t, tbl, want)
	if replayed := replay(t, tbl); fmt.Sprint(replayed) != fmt.Sprint(got) {
		t.Fatalf("the log replayed from offset 0 differs from the table")
	}
}

// checkRows compares the table with the exact answer and returns its rows.
func checkRows(t *testing.T, tbl *aggmerge.Table, want map[int64][]string) map[int64][]string {
	t.Helper()
	got := map[int64][]string{}
	err := tbl.Scan(func(r aggmerge.Row) error {
		got[r.Key[0].Int()] = format(r.Values)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for k, w := range want {
		if g := got[k]; fmt.Sprint(g) != fmt.Sprint(w) {
			if bad < 3 {
				t.Errorf("key %d:\n got %.200v\nwant %.200v", k, g, w)
			}
			bad++
		}
	}
	if bad > 0 {
		var diffs []string
		for k, w := range want {
			if g := got[k]; fmt.Sprint(g) != fmt.Sprint(w) && len(g) > 1 {
				diffs = append(diffs, fmt.Sprintf("%d:%s/%s", k, g[1], w[1]))
			}
		}
		t.Logf("count per wrong key (got/want): %v", diffs)
		for k, w := range want {
			g := got[k]
			if fmt.Sprint(g) == fmt.Sprint(w) || len(g) < 5 {
				continue
			}
			seen := map[string]int{}
			var dups []string
			for _, s := range strings.Split(g[4], ",") {
				seen[s]++
				if seen[s] == 2 {
					dups = append(dups, s)
				}
			}
			t.Logf("key %d: %d seqs, duplicated: %.400v", k, len(strings.Split(g[4], ",")), dups)
		}
	}
	if len(got) != len(want) || bad > 0 {
		t.Fatalf("%d of %d keys wrong; %d rows, want %d", bad, len(want), len(got), len(want))
	}
	return got
}

// format prints values as the expectation does (strings unquoted).
func format(vals []agg.Value) []string {
	row := make([]string, len(vals))
	for i, v := range vals {
		if v.Kind() == agg.KindString {
			row[i] = v.Str()
		} else {
			row[i] = v.String()
		}
	}
	return row
}

// replay rebuilds the rows from every bucket's log.
func replay(t *testing.T, tbl *aggmerge.Table) map[int64][]string {
	t.Helper()
	rows := map[int64][]string{}
	for b := 0; b < tbl.Schema().Buckets; b++ {
		err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
			switch e.Op {
			case aggmerge.Insert, aggmerge.UpdateAfter:
				rows[e.Key[0].Int()] = format(e.After)
			case aggmerge.Delete:
				delete(rows, e.Key[0].Int())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return rows
}

func openTable(t *testing.T) *aggmerge.Table {
	tbl, err := aggmerge.Open(t.TempDir(), schema(), aggmerge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}

// runJob runs sequence → chaos → writer until the bounded input ended. It
// is bounded by its work, not by a deadline: the faults come at calls of the
// chaos operator, so a slow machine meets as many as a fast one.
func runJob(t *testing.T, tbl *aggmerge.Table, count uint64, par int, f *chaos.Faults, skipUndo, noCombine bool) {
	t.Helper()
	j := runtime.NewJob(runtime.Options{Name: "sums", DataDir: t.TempDir(), Parallelism: par, BatchSize: 64,
		Checkpoint: runtime.CheckpointOptions{Interval: 10 * time.Millisecond},
		Restart:    runtime.RestartOptions{MaxAttempts: 1000, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: count}))
	if f != nil {
		src = chaos.Operator(src, "chaos", f)
	}
	cfg := writer.Config{Table: tbl, BatchSize: 100, UnsafeSkipUndo: skipUndo, NoCombine: noCombine}
	if err := writer.To(src, "table", cfg, mapEvent); err != nil {
		t.Fatal(err)
	}
	if err := j.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// faultsFor returns the faults of the writer tests: one in every 63 batches
// of each chaos subtask, 5 at most. 30,000 records or more in batches of at
// most 64 are 469 batches at p=1, and at least 117 in each subtask at p=2 or
// p=3 (splits of 3/8, 3/8 and 2/8 of the input), so every run meets at
// least 5.
func faultsFor(seed int64) *chaos.Faults { return chaos.NewWithOdds(seed, 5, 8) }

func TestWriterNoFaults(t *testing.T) {
	for _, noCombine := range []bool{false, true} {
		tbl := openTable(t)
		runJob(t, tbl, 20_000, 2, nil, false, noCombine)
		checkTable(t, tbl, expected(20_000))
	}
}

func TestWriterExactlyOnceWithFaults(t *testing.T) {
	for _, tc := range []struct {
		par       int
		noCombine bool
	}{{1, false}, {3, false}, {1, true}, {3, true}} {
		t.Run(fmt.Sprintf("p=%d/nocombine=%v", tc.par, tc.noCombine), func(t *testing.T) {
			s := seed(t)
			count := uint64(100_000)
			if tc.noCombine {
				count = 30_000 // a table write per record: the slow case does less
			}
			f := faultsFor(s)
			tbl := openTable(t)
			runJob(t, tbl, count, tc.par, f, false, tc.noCombine)
			t.Logf("seed %d: faults injected: %v", s, f.Schedule())
			if f.Total() < 5 {
				t.Fatalf("seed %d: only %d faults injected", s, f.Total())
			}
			checkTable(t, tbl, expected(count))
		})
	}
}

// TestWriterWithoutUndoDoubleCounts proves the check bites: with undo off,
// writes past the last checkpoint are replayed on top of themselves.
func TestWriterWithoutUndoDoubleCounts(t *testing.T) {
	s := seed(t)
	f := faultsFor(s)
	tbl := openTable(t)
	runJob(t, tbl, 30_000, 2, f, true, true) // no combining: writes land between barriers
	t.Logf("seed %d: faults injected: %v", s, f.Schedule())
	if f.Total() == 0 {
		t.Fatalf("seed %d: no fault injected", s)
	}
	want := expected(30_000)
	var exact int
	_ = tbl.Scan(func(r aggmerge.Row) error {
		if r.Values[0].String() == want[r.Key[0].Int()][0] {
			exact++
		}
		return nil
	})
	if exact == len(want) {
		t.Fatalf("seed %d: %d faults and undo off, yet every sum is exact: the check cannot detect double counting", s, f.Total())
	}
	t.Logf("seed %d: %d of %d sums wrong without undo, as expected", s, len(want)-exact, len(want))
}
