package eotest

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

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
	if dir := os.Getenv(childEnv); dir != "" {
		par, _ := strconv.Atoi(os.Getenv(childEnv + "_PAR"))
		if err := runChild(dir, par); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
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
			seed := *seedFlag
			if seed == 0 {
				seed = time.Now().UnixNano()
			}
			t.Logf("seed %d (rerun with -seed %d)", seed, seed)
			rng := rand.New(rand.NewSource(seed))
			dir := t.TempDir()
			start := func() *exec.Cmd {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), childEnv+"="+dir, childEnv+"_PAR="+strconv.Itoa(par))
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				return cmd
			}
			finishedEarly := 0
			for k := 0; k < *killsFlag; k++ {
				cmd := start()
				wait := time.Duration(20+rng.Intn(400)) * time.Millisecond
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("seed %d: child failed before kill %d: %v", seed, k, err)
					}
					finishedEarly++
				case <-time.After(wait):
					if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
					<-done
				}
			}
			if finishedEarly > *killsFlag/2 {
				t.Fatalf("seed %d: the job finished before %d of %d kills: the kills did not hit it running", seed, finishedEarly, *killsFlag)
			}
			cmd := start()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("seed %d: final run: %v", seed, err)
			}
			if err := Check(filepath.Join(dir, "out"), count, keys); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		})
	}
}
