package writer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// TestWriterPartials: a sink declared Partials takes its values as partial
// aggregates (what a window that pre-aggregated its records emits): a
// count's value is the number counted, added to the row, not one more
// input; sum and max fold as usual. Combined and record by record.
func TestWriterPartials(t *testing.T) {
	const count = 2000
	for _, noCombine := range []bool{false, true} {
		t.Run(fmt.Sprintf("nocombine=%v", noCombine), func(t *testing.T) {
			tbl := openTable(t)
			j := runtime.NewJob(runtime.Options{Name: "partials", DataDir: t.TempDir(), Parallelism: 2, BatchSize: 64,
				Checkpoint: runtime.CheckpointOptions{Interval: 10 * time.Millisecond}})
			src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: count}))
			cfg := writer.Config{Table: tbl, Columns: []string{"total", "n", "top"}, Partials: true, NoCombine: noCombine}
			// Each record stands for a pre-aggregated window of seq%5+1 inputs.
			err := writer.To(src, "table", cfg, func(e operators.Event, r *writer.Row) error {
				r.Kind = runtime.RowInsert
				r.Key = append(r.Key[:0], agg.IntValue(int64(e.Seq%keys)))
				r.Vals = append(r.Vals[:0], agg.IntValue(e.Value), agg.IntValue(int64(e.Seq%5+1)), agg.IntValue(e.Value))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Run(t.Context()); err != nil {
				t.Fatal(err)
			}
			want := map[int64][3]int64{}
			for seq := uint64(0); seq < count; seq++ {
				k, v := int64(seq%keys), operators.ValueOf(seq)
				w := want[k]
				want[k] = [3]int64{w[0] + v, w[1] + int64(seq%5+1), max(w[2], v)}
			}
			wantTriples(t, tbl, want)
		})
	}
}

// TestWriterPartialsCannotRetract: partial aggregates cannot be taken back.
func TestWriterPartialsCannotRetract(t *testing.T) {
	j := runtime.NewJob(runtime.Options{Name: "partials", DataDir: t.TempDir()})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: 1}))
	cfg := writer.Config{Table: openTable(t), Columns: []string{"total"}, Partials: true, Retracts: true}
	if err := writer.To(src, "table", cfg, mapEvent); err == nil {
		t.Fatal("a sink of partials that retracts was accepted")
	}
}

// TestWriterClears: a row with Clear removes the written columns of its
// key's row, in order with the key's writes before and after it (combined
// or not): what a session window does to the rows of the sessions it
// merged. The row is deleted (-D in the log) when nothing else is left.
func TestWriterClears(t *testing.T) {
	const count = 3000
	for _, noCombine := range []bool{false, true} {
		t.Run(fmt.Sprintf("nocombine=%v", noCombine), func(t *testing.T) {
			tbl := openTable(t)
			j := runtime.NewJob(runtime.Options{Name: "clears", DataDir: t.TempDir(), Parallelism: 1, BatchSize: 64,
				Checkpoint: runtime.CheckpointOptions{Interval: 10 * time.Millisecond}})
			src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: count}))
			cfg := writer.Config{Table: tbl, Columns: []string{"total", "n", "top"}, Partials: true, Clears: true, NoCombine: noCombine}
			clears := func(seq uint64) bool { return seq%7 == 3 || seq >= count-keys/2 }
			err := writer.To(src, "table", cfg, func(e operators.Event, r *writer.Row) error {
				r.Kind = runtime.RowInsert
				r.Key = append(r.Key[:0], agg.IntValue(int64(e.Seq%keys)))
				r.Clear = clears(e.Seq)
				r.Vals = r.Vals[:0]
				if !r.Clear {
					r.Vals = append(r.Vals, agg.IntValue(e.Value), agg.IntValue(1), agg.IntValue(e.Value))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Run(t.Context()); err != nil {
				t.Fatal(err)
			}
			want := map[int64][3]int64{}
			for seq := uint64(0); seq < count; seq++ {
				k, v := int64(seq%keys), operators.ValueOf(seq)
				if clears(seq) {
					delete(want, k)
					continue
				}
				w := want[k]
				want[k] = [3]int64{w[0] + v, w[1] + 1, max(w[2], v)}
			}
			wantTriples(t, tbl, want)
			if len(want) == 0 || len(want) > keys/2 {
				t.Fatalf("%d keys left of %d: the case proves little", len(want), keys)
			}
			deletes := 0
			for b := range tbl.Schema().Buckets {
				if err := tbl.ReadLog(b, 0, func(e *aggmerge.Entry) error {
					if e.Key != nil && e.Op == aggmerge.Delete {
						deletes++
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if deletes == 0 {
				t.Fatal("no -D in the log")
			}
		})
	}
}

// TestWriterClearNeedsClears: a Clear reaching a sink not declared Clears
// fails the job (its restore might skip undo).
func TestWriterClearNeedsClears(t *testing.T) {
	j := runtime.NewJob(runtime.Options{Name: "clears", DataDir: t.TempDir(), Restart: runtime.RestartOptions{MaxAttempts: -1}})
	src := runtime.FromSource(j, "sequence", operators.NewSequence(operators.SequenceConfig{Count: 1}))
	cfg := writer.Config{Table: openTable(t), Columns: []string{"total"}, Partials: true}
	err := writer.To(src, "table", cfg, func(e operators.Event, r *writer.Row) error {
		r.Kind, r.Clear = runtime.RowInsert, true
		r.Key = append(r.Key[:0], agg.IntValue(1))
		r.Vals = r.Vals[:0]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "Clears") {
		t.Fatalf("run: %v, want the clear refused", err)
	}
}

// wantTriples fails unless tbl holds exactly want: per int64 key its total,
// n and top.
func wantTriples(t *testing.T, tbl *aggmerge.Table, want map[int64][3]int64) {
	t.Helper()
	got := map[int64][3]int64{}
	if err := tbl.Scan(func(r aggmerge.Row) error {
		got[r.Key[0].Int()] = [3]int64{r.Values[0].Int(), r.Values[1].Int(), r.Values[2].Int()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table (total, n, top per key):\n got %v\nwant %v", got, want)
	}
}
