package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/state"
)

// cutRecord is record n of source subtask Sub.
type cutRecord struct{ Sub, N int }

// cutSource emits cutRecords; gated, it stops after every every-th record
// of its subtask (a cut), opens its cut gate and reads on only after its
// Snapshot there. Subtask 1 is slower than subtask 0.
type cutSource struct {
	gated bool
	every int
	gate  *runtime.CutGate
	sub   int
	n     int // records emitted
	cut   int // the next cut
}

func (s *cutSource) Open(ctx *runtime.Context) error {
	s.sub, s.cut = ctx.Subtask, s.every
	if ctx.RestoredOK {
		for _, b := range ctx.State.Unions["n"] {
			var p cutRecord
			if err := json.Unmarshal(b, &p); err != nil {
				return err
			}
			if p.Sub == s.sub {
				s.n = p.N
			}
		}
		s.cut = s.n + s.every - s.n%s.every
	}
	if !s.gated {
		return nil
	}
	var err error
	s.gate, err = ctx.CutGate()
	return err
}

func (s *cutSource) Read(buf []cutRecord) ([]cutRecord, error) {
	if s.gated && s.n == s.cut {
		s.gate.Open()
		time.Sleep(time.Millisecond) // nothing to read: return soon, not at once
		return buf, nil
	}
	if s.sub == 1 {
		time.Sleep(200 * time.Microsecond)
	}
	s.n++
	return append(buf, cutRecord{s.sub, s.n}), nil
}

func (s *cutSource) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	if s.n == s.cut {
		s.cut += s.every
	}
	b, err := json.Marshal(cutRecord{s.sub, s.n})
	return state.OperatorState{Unions: map[string][][]byte{"n": {b}}}, err
}

func (s *cutSource) NotifyComplete(barrier.CheckpointID) error { return nil }
func (s *cutSource) Close() error                              { return nil }

// cutSink records, at every checkpoint, the last record it got from each
// source subtask, then the checkpoint's id.
type cutSink struct {
	last []int
	mu   *sync.Mutex
	seen *[][]int // per checkpoint after the initial one
}

func (s *cutSink) Open(*runtime.Context) error { s.last = make([]int, 2); return nil }
func (s *cutSink) Write(batch []cutRecord) error {
	for _, r := range batch {
		if r.N != s.last[r.Sub]+1 && s.last[r.Sub] != 0 {
			return fmt.Errorf("subtask %d: record %d after %d", r.Sub, r.N, s.last[r.Sub])
		}
		s.last[r.Sub] = r.N
	}
	return nil
}
func (s *cutSink) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.seen = append(*s.seen, append(slices.Clone(s.last), int(id)))
	return state.OperatorState{}, nil
}
func (s *cutSink) NotifyComplete(barrier.CheckpointID) error { return nil }
func (s *cutSink) Close() error                              { return nil }

// runCuts runs two cutSource subtasks into one cutSink, checkpointing every
// 2 ms, until the sink saw 20 checkpoints, then stops the job (a final
// checkpoint). It returns what the sink had got at each checkpoint
// ([subtask 0's last, subtask 1's last, checkpoint id]) and the job's
// status of its gates before the stop.
func runCuts(t *testing.T, gated bool) ([][]int, *runtime.CutGateStatus) {
	t.Helper()
	var mu sync.Mutex
	var seen [][]int
	j := runtime.NewJob(runtime.Options{Name: "cuts", DataDir: t.TempDir(), Parallelism: 2,
		Checkpoint: runtime.CheckpointOptions{Interval: 2 * time.Millisecond}})
	src := runtime.FromSource(j, "counter", func() runtime.Source[cutRecord] { return &cutSource{gated: gated, every: 50} })
	runtime.SinkTo(runtime.Rebalance(src, "one", runtime.WithParallelism(1)), "sink",
		func() runtime.Sink[cutRecord] { return &cutSink{mu: &mu, seen: &seen} }, runtime.WithParallelism(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 20 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("job ended: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	gates := j.Status().CutGates
	j.Stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return seen, gates
}

// TestCutGatesCutCheckpoints: with cut gates, every checkpoint (periodic
// and the final one) has both source subtasks at the same cut, although
// one reads faster and checkpoints are due far more often than cuts come.
func TestCutGatesCutCheckpoints(t *testing.T) {
	seen, gates := runCuts(t, true)
	if gates == nil || gates.Total != 2 || gates.Open > 2 {
		t.Fatalf("status of the cut gates %+v, want 2 gates", gates)
	}
	for i, last := range seen {
		if last[0] != last[1] || last[0]%50 != 0 {
			t.Fatalf("checkpoint %d of %d cut the sources at %v, want both at the same multiple of 50", i, len(seen), last)
		}
	}
	if final := seen[len(seen)-1]; final[0] < 100 {
		t.Fatalf("the sources reached only %v", final)
	}
}

// TestCutGatesBite: without gates the same sources are cut anywhere.
func TestCutGatesBite(t *testing.T) {
	seen, gates := runCuts(t, false)
	if gates != nil {
		t.Fatalf("status of the cut gates %+v without any", gates)
	}
	for _, last := range seen {
		if last[0] != last[1] || last[0]%50 != 0 {
			return
		}
	}
	t.Fatalf("every one of %d checkpoints without gates was at a cut: %v", len(seen), seen)
}
