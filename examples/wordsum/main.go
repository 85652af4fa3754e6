// Command wordsum is a small ebbflow pipeline in Go: a deterministic sequence
// source, a map and a filter, a keyed running sum kept in pebble state, and
// the two-phase collecting sink, checkpointed every 200 ms. Run it twice with
// the same -data dir: the second run restores the last checkpoint and
// carries on exactly where the first stopped.
//
//	go run ./examples/wordsum -data /tmp/wordsum -count 1000000
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
	"github.com/ebbflow/ebbflow/state/pebblestate"
)

// Total is the running total of one key.
type Total struct {
	Key   uint64
	Sum   int64
	Count int64
}

func main() {
	data := flag.String("data", "./data/wordsum", "data directory (checkpoints, state, output)")
	count := flag.Uint64("count", 1_000_000, "records to generate")
	par := flag.Int("parallelism", 2, "subtasks per operator")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := filepath.Join(*data, "output")
	if err := run(ctx, *data, out, *count, *par, log); err != nil {
		fmt.Fprintln(os.Stderr, "wordsum:", err)
		os.Exit(1)
	}
	totals, err := Totals(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordsum:", err)
		os.Exit(1)
	}
	for _, t := range totals[:min(5, len(totals))] {
		fmt.Printf("key %d: sum %d over %d records\n", t.Key, t.Sum, t.Count)
	}
	fmt.Printf("... %d keys\n", len(totals))
}

// Build adds the pipeline to j, writing committed totals under out.
func Build(j *runtime.Job, count uint64, out string) {
	events := runtime.FromSource(j, "numbers", operators.NewSequence(operators.SequenceConfig{Count: count, Keys: 1000}))
	totals := runtime.Map(events, "to-total", func(e operators.Event) Total {
		return Total{Key: e.Key, Sum: e.Value, Count: 1}
	})
	small := runtime.Filter(totals, "small-values", func(t Total) bool { return t.Sum <= 500 })
	byKey := runtime.KeyBy(small, func(t Total) uint64 { return t.Key }, nil)
	running := runtime.Reduce(byKey, "running-total", func(acc, t Total) Total {
		return Total{Key: t.Key, Sum: acc.Sum + t.Sum, Count: acc.Count + t.Count}
	}, nil)
	runtime.SinkTo(running, "collect", operators.NewCollectSink[Total](out, nil))
}

func run(ctx context.Context, data, out string, count uint64, par int, log *slog.Logger) error {
	j := runtime.NewJob(runtime.Options{
		Name:         "wordsum",
		DataDir:      data,
		Parallelism:  par,
		StateBackend: pebblestate.NewFactory(pebblestate.Options{}),
		Checkpoint:   runtime.CheckpointOptions{Interval: 200 * time.Millisecond},
		Logger:       log,
	})
	Build(j, count, out)
	return j.Run(ctx)
}

// Totals reads the committed running totals and keeps the last (largest)
// per key, sorted by key.
func Totals(out string) ([]Total, error) {
	rows, err := operators.ReadCommitted[Total](out, state.JSONCodec[Total]{})
	if err != nil {
		return nil, err
	}
	last := map[uint64]Total{}
	for _, r := range rows {
		if r.Count > last[r.Key].Count {
			last[r.Key] = r
		}
	}
	res := make([]Total, 0, len(last))
	for _, t := range last {
		res = append(res, t)
	}
	sort.Slice(res, func(a, b int) bool { return res[a].Key < res[b].Key })
	return res, nil
}
