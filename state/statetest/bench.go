package statetest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/cputime"
	"github.com/ebbflow/ebbflow/state"
)

const benchKeys = 100_000

func benchKeyNames() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	return keys
}

// Bench runs the keyed state benchmarks on f:
//
//   - GetPutHot: Value Get+Put of 100k keys, all cached;
//   - RunningSum: Reducing.Add over 100k keys with a checkpoint (flush,
//     capture, persist) every 500k records;
//   - Flush: Flush of 100k dirty entries;
//   - Capture: Capture and persist of a 100k-key state;
//   - CheckpointAllDirty: Capture and persist with all 100k keys dirty,
//     as a running sum checkpointed every second has them: the write of the
//     dirty entries into the backend is part of it;
//   - Restore/same: open a subtask from a snapshot of exactly its range;
//   - Restore/rescale: open the one subtask of parallelism 1 from the two
//     snapshots of a 100k-key state taken at parallelism 2.
func Bench(b *testing.B, f state.BackendFactory) {
	b.Run("GetPutHot", func(b *testing.B) { benchGetPutHot(b, f) })
	b.Run("RunningSum", func(b *testing.B) { benchRunningSum(b, f) })
	b.Run("Flush", func(b *testing.B) { benchFlush(b, f) })
	b.Run("Capture", func(b *testing.B) { benchCapture(b, f) })
	b.Run("CheckpointAllDirty", func(b *testing.B) { benchCheckpointAllDirty(b, f) })
	b.Run("Restore", func(b *testing.B) { benchRestore(b, f) })
}

func benchOpen(b *testing.B, f state.BackendFactory) (*harness, *subtask) {
	h := newHarness(b, f, state.DefaultMaxParallelism, 0)
	s := h.open(1, 0, nil)
	b.Cleanup(func() { s.close(b) })
	return h, s
}

// benchCheckpoint captures and persists s for checkpoint id.
func benchCheckpoint(b *testing.B, h *harness, s *subtask, id barrier.CheckpointID) {
	dir, err := h.st.SubtaskDir(id, opUID, 0)
	if err != nil {
		b.Fatal(err)
	}
	persist, err := s.kd.Capture(id, dir)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := persist(); err != nil {
		b.Fatal(err)
	}
}

func benchGetPutHot(b *testing.B, f state.BackendFactory) {
	_, s := benchOpen(b, f)
	vals := state.NewValue(s.kd, "v", state.CodecFor[string](), state.CodecFor[int64]())
	keys := benchKeyNames()
	for _, k := range keys {
		if err := vals.Put(k, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := keys[i%benchKeys]
		v, _, err := vals.Get(k)
		if err != nil {
			b.Fatal(err)
		}
		if err := vals.Put(k, v+1); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRunningSum(b *testing.B, f state.BackendFactory) {
	const every = 500_000
	h, s := benchOpen(b, f)
	sums := state.NewReducing(s.kd, "sum", state.CodecFor[string](), state.CodecFor[int64](), sum)
	keys := benchKeyNames()
	b.ReportAllocs()
	b.ResetTimer()
	id := barrier.CheckpointID(0)
	for i := range b.N {
		// A multiplicative stride visits the keys in a scattered order.
		if err := sums.Add(keys[(i*7919)%benchKeys], 1); err != nil {
			b.Fatal(err)
		}
		if i%every == every-1 {
			id++
			benchCheckpoint(b, h, s, id)
		}
	}
}

func benchFlush(b *testing.B, f state.BackendFactory) {
	_, s := benchOpen(b, f)
	vals := state.NewValue(s.kd, "v", state.CodecFor[string](), state.CodecFor[int64]())
	keys := benchKeyNames()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		for _, k := range keys {
			if err := vals.Put(k, int64(i)); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := s.kd.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

func benchCapture(b *testing.B, f state.BackendFactory) {
	h, s := benchOpen(b, f)
	vals := state.NewValue(s.kd, "v", state.CodecFor[string](), state.CodecFor[int64]())
	keys := benchKeyNames()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		// Change a tenth of the keys between checkpoints.
		for j := i % 10; j < benchKeys; j += 10 {
			if err := vals.Put(keys[j], int64(i)); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.kd.Flush(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		benchCheckpoint(b, h, s, barrier.CheckpointID(i))
	}
}

func benchCheckpointAllDirty(b *testing.B, f state.BackendFactory) {
	h, s := benchOpen(b, f)
	sums := state.NewReducing(s.kd, "sum", state.Uint64Codec{}, state.CodecFor[int64](), sum)
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	for i := range b.N {
		b.StopTimer()
		for k := range uint64(benchKeys) {
			// A multiplicative stride makes the order of first writes scattered.
			if err := sums.Add((k*7919)%benchKeys, 1); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start := cputime.Process()
		benchCheckpoint(b, h, s, barrier.CheckpointID(i))
		cpu += cputime.Process() - start
		if i >= 2 {
			// Keep the disk use flat, as the runtime's retention does.
			if err := os.RemoveAll(h.st.Path(barrier.CheckpointID(i - 2))); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchKeys), "ns/key")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*benchKeys), "cpu-ns/key")
}

func benchRestore(b *testing.B, f state.BackendFactory) {
	h := newHarness(b, f, state.DefaultMaxParallelism, 0)
	subs := []*subtask{h.open(2, 0, nil), h.open(2, 1, nil)}
	sc := state.CodecFor[string]()
	vals := []*state.Value[string, int64]{
		state.NewValue(subs[0].kd, "v", sc, state.CodecFor[int64]()),
		state.NewValue(subs[1].kd, "v", sc, state.CodecFor[int64]()),
	}
	for i, k := range benchKeyNames() {
		o := state.SubtaskForGroup(h.maxPar, 2, state.KeyGroupOf([]byte(k), h.maxPar))
		if err := vals[o].Put(k, int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	md := h.checkpoint(1, subs...)
	for _, s := range subs {
		s.close(b)
	}
	for _, c := range []struct {
		name string
		p    int
	}{{"same", 2}, {"rescale", 1}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				_, restored := h.st.Restore(md, opUID, c.p, 0)
				be, err := f.OpenKeyed(state.KeyedSpec{Dir: h.subtaskWorkDir(c.p, 0), KeyGroups: state.RangeFor(h.maxPar, c.p, 0), Restore: restored})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				be.Close()
				b.StartTimer()
			}
		})
	}
}
