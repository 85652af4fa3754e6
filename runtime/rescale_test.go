package runtime_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/eotest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
)

// TestRescale stops a job at parallelism 2 with a final checkpoint half way,
// then finishes it at parallelism 3 or 1 from that checkpoint: the running
// sums continue exactly, so every key's state moved to its new owner.
func TestRescale(t *testing.T) {
	const count, keys = 100_000, 300
	for _, to := range []int{3, 1} {
		t.Run(fmt.Sprintf("2to%d", to), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			run := func(par int, stopAfter time.Duration) {
				j := runtime.NewJob(runtime.Options{Name: "rescale", DataDir: dir,
					Checkpoint: runtime.CheckpointOptions{Interval: 10 * time.Millisecond}})
				eotest.Build(j, eotest.Config{Count: count, Keys: keys, Parallelism: par, Rate: 50_000}, out)
				if stopAfter > 0 {
					time.AfterFunc(stopAfter, j.Stop)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := j.Run(ctx); err != nil {
					t.Fatalf("run at parallelism %d: %v", par, err)
				}
			}
			run(2, 300*time.Millisecond)
			got, err := operators.ReadCommitted(out, eotest.Codec)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 || len(got) >= count {
				t.Fatalf("the first run committed %d of %d records; want a part", len(got), count)
			}
			t.Logf("stopped at parallelism 2 after %d records; finishing at %d", len(got), to)
			run(to, 0)
			if err := eotest.Check(out, count, keys); err != nil {
				t.Fatal(err)
			}
		})
	}
}
