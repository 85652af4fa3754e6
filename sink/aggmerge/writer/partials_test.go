package writer_test

import (
	"fmt"
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
