package runtime_test

import (
	"context"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

func TestStatelessPipelineBounded(t *testing.T) {
	for _, par := range []int{1, 3} {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		j := runtime.NewJob(runtime.Options{Name: "stateless", DataDir: dir, Parallelism: par,
			Checkpoint: runtime.CheckpointOptions{Interval: 20 * time.Millisecond}})
		src := runtime.FromSource(j, "seq", operators.NewSequence(operators.SequenceConfig{Count: 100_000}))
		doubled := runtime.Map(src, "double", func(e operators.Event) operators.Event { e.Value *= 2; return e })
		even := runtime.Filter(doubled, "even-seq", func(e operators.Event) bool { return e.Seq%2 == 0 })
		runtime.SinkTo(runtime.Rebalance(even, "spread"), "collect", operators.NewCollectSink[operators.Event](out, state.JSONCodec[operators.Event]{}))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := j.Run(ctx); err != nil {
			t.Fatalf("p=%d: run: %v", par, err)
		}
		cancel()
		got, err := operators.ReadCommitted[operators.Event](out, state.JSONCodec[operators.Event]{})
		if err != nil {
			t.Fatal(err)
		}
		sort.Slice(got, func(a, b int) bool { return got[a].Seq < got[b].Seq })
		if len(got) != 50_000 {
			t.Fatalf("p=%d: got %d records, want 50000", par, len(got))
		}
		for i, e := range got {
			if e.Seq != uint64(2*i) || e.Value != 2*operators.ValueOf(e.Seq) {
				t.Fatalf("p=%d: record %d = %+v", par, i, e)
			}
		}
	}
}
