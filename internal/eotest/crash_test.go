package eotest

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state/pebblestate"
)

var (
	seedFlag  = flag.Int64("seed", 0, "seed of the kill schedule (0: from the clock)")
	killsFlag = flag.Int("kills", 20, "number of SIGKILLs before the job may finish")
)

const (
	childEnv = "EBBFLOW_EOTEST_CHILD"
	count    = 300_000
	keys     = 1_000
)

// TestMain lets the test binary double as the job process that the crash
// test kills.
func TestMain(m *testing.M) {
	crashtest.Main(m, childEnv, func(dir string) error {
		par, _ := strconv.Atoi(os.Getenv(childEnv + "_PAR"))
		return runChild(dir, par)
	})
}

// runChild runs the test job with pebble state under dir until it ends.
func runChild(dir string, par int) error {
	j := runtime.NewJob(runtime.Options{Name: "crash", DataDir: dir,
		StateBackend: pebblestate.NewFactory(pebblestate.Options{}),
		Checkpoint:   runtime.CheckpointOptions{Interval: 50 * time.Millisecond}})
	// Paced so that the kills land while records flow: about 5 s in total.
	Build(j, Config{Count: count, Keys: keys, Parallelism: par, Rate: 60_000 / float64(par)}, filepath.Join(dir, "out"))
	return j.Run(context.Background())
}

// TestCrashProcessSIGKILL runs the job in a child process with its state on
// disk, kills it with SIGKILL at random moments, then lets it finish: the
// committed output must be exactly the answer.
func TestCrashProcessSIGKILL(t *testing.T) {
	for _, par := range []int{1, 3} {
		t.Run(fmt.Sprintf("p=%d", par), func(t *testing.T) {
			seed := crashtest.Seed(t, *seedFlag)
			rng := rand.New(rand.NewSource(seed))
			dir := t.TempDir()
			env := []string{childEnv + "=" + dir, childEnv + "_PAR=" + strconv.Itoa(par)}
			finishedEarly := 0
			for k := 0; k < *killsFlag; k++ {
				killed, err := crashtest.Start(t, env...).KillAfter(time.Duration(20+rng.Intn(400)) * time.Millisecond)
				if err != nil {
					t.Fatalf("seed %d: child failed before kill %d: %v", seed, k, err)
				}
				if !killed {
					finishedEarly++
				}
			}
			if finishedEarly > *killsFlag/2 {
				t.Fatalf("seed %d: the job finished before %d of %d kills: the kills did not hit it running", seed, finishedEarly, *killsFlag)
			}
			if err := crashtest.Start(t, env...).Wait(2 * time.Minute); err != nil {
				t.Fatalf("seed %d: final run: %v", seed, err)
			}
			if err := Check(filepath.Join(dir, "out"), count, keys); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		})
	}
}
