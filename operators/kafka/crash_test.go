package kafka_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/crashtest"
	"github.com/ebbflow/ebbflow/internal/eotest"
	"github.com/ebbflow/ebbflow/internal/kafkatest"
	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state/pebblestate"
)

var (
	seedFlag  = flag.Int64("seed", 0, "seed of the kill schedule (0: from the clock)")
	killsFlag = flag.Int("kills", 12, "number of SIGKILLs before the job may finish")
)

const (
	childEnv   = "EBBFLOW_KAFKA_CRASH_CHILD" // the child's data dir
	crashCount = 40_000
	crashParts = 4
)

// TestMain lets the test binary double as the job process that
// TestCrashExactlyOnce kills.
func TestMain(m *testing.M) { crashtest.Main(m, childEnv, runCrashChild) }

// runCrashChild runs kafka → slow map → keyBy → running sum → collecting sink, with
// pebble state under dir, until it is killed.
func runCrashChild(dir string) error {
	par, _ := strconv.Atoi(os.Getenv(childEnv + "_PAR"))
	src, err := kafka.NewSource(kafka.Config{
		Connection: kafka.Connection{Brokers: strings.Split(os.Getenv(childEnv+"_BROKERS"), ",")},
		Topics:     []string{os.Getenv(childEnv + "_TOPIC")},
	}, eventFormat)
	if err != nil {
		return err
	}
	// Small batches and a slowed pipeline (about 8k records/s per subtask,
	// below the producer's pace) keep the source behind, with fetched
	// records waiting in it, whenever a kill or a barrier comes.
	j := runtime.NewJob(runtime.Options{Name: "kafka-crash", DataDir: dir, Parallelism: par, BatchSize: 64,
		StateBackend: pebblestate.NewFactory(pebblestate.Options{}),
		Checkpoint:   runtime.CheckpointOptions{Interval: 50 * time.Millisecond}})
	events := runtime.Map(runtime.FromSource(j, "kafka", src.New), "slow", func(e operators.Event) operators.Event {
		if e.Seq%16 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		return e
	})
	keyed := runtime.KeyBy(events, func(e operators.Event) uint64 { return e.Key }, nil)
	sums := runtime.Reduce(keyed, "running-sum", func(acc, v operators.Event) operators.Event {
		v.Value += acc.Value
		return v
	}, nil)
	runtime.SinkTo(sums, "collect", operators.NewCollectSink(filepath.Join(dir, "out"), eotest.Codec))
	return j.Run(context.Background())
}

// TestCrashExactlyOnce produces records over several partitions, part
// before and part while the job runs, kills the job process with SIGKILL
// at random moments, then lets it catch up: the committed running sums
// must be exactly the answer (eotest.CheckOutputs).
func TestCrashExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a job process many times")
	}
	for _, par := range []int{1, 2} {
		t.Run(fmt.Sprintf("p=%d", par), func(t *testing.T) { crashExactlyOnce(t, par) })
	}
}

func crashExactlyOnce(t *testing.T, par int) {
	seed := crashtest.Seed(t, *seedFlag)
	rng := rand.New(rand.NewSource(seed))
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.NewTopic(t, brokers, crashParts)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")

	produceEvents(t, brokers, topic, crashParts, 0, crashCount/2)
	// The other half arrives while the job runs and dies: a paced producer,
	// 1000 records every 100 ms.
	producer := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produced := make(chan error, 1)
	go func() {
		for from := uint64(crashCount / 2); from < crashCount; from += 1000 {
			if err := producer.ProduceSync(t.Context(), eventRecords(topic, crashParts, from, from+1000, testKeys)...).FirstErr(); err != nil {
				produced <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		produced <- nil
	}()

	env := []string{childEnv + "=" + dir, childEnv + "_PAR=" + strconv.Itoa(par),
		childEnv + "_BROKERS=" + strings.Join(brokers, ","), childEnv + "_TOPIC=" + topic}
	var progress []int // committed outputs after each kill
	for k := 0; k < *killsFlag; k++ {
		if killed, err := crashtest.Start(t, env...).KillAfter(time.Duration(100+rng.Intn(500)) * time.Millisecond); !killed {
			t.Fatalf("seed %d: child ended before kill %d: %v", seed, k, err)
		}
		got, _ := operators.ReadCommitted(out, eotest.Codec)
		progress = append(progress, len(got))
	}
	t.Logf("committed after each kill: %v", progress)
	if progress[len(progress)-1] == 0 || progress[0] >= crashCount {
		t.Fatalf("seed %d: the kills did not hit the job while it made progress: %v", seed, progress)
	}
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}

	// The last run catches up; then wait a few checkpoints more, so that a
	// duplicate committed late would show. A run that stops making progress
	// short of the count is checked as it is.
	final := crashtest.Start(t, env...)
	last, lastAt := -1, time.Now()
	for {
		got, err := operators.ReadCommitted(out, eotest.Codec)
		if err == nil && len(got) >= crashCount {
			break
		}
		if len(got) != last {
			last, lastAt = len(got), time.Now()
		}
		if time.Since(lastAt) > 5*time.Second {
			t.Logf("seed %d: no progress for 5 s at %d of %d committed records", seed, len(got), crashCount)
			break
		}
		if ended, err := final.Exited(); ended {
			t.Fatalf("seed %d: final child ended: %v", seed, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if killed, err := final.KillAfter(300 * time.Millisecond); !killed {
		t.Fatalf("seed %d: final child ended: %v", seed, err)
	}
	got, err := operators.ReadCommitted(out, eotest.Codec)
	if err != nil {
		t.Fatal(err)
	}
	if err := eotest.CheckOutputs(got, crashCount, testKeys); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
}
