package statetest

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
)

const opUID = "op"

// harness runs the keyed state of one operator over real checkpoint storage.
type harness struct {
	t       testing.TB
	f       state.BackendFactory
	st      *state.Storage
	work    string
	maxPar  int
	entries int // cache bound of every Keyed
	opened  int
}

func newHarness(t testing.TB, f state.BackendFactory, maxPar, cacheEntries int) *harness {
	t.Helper()
	st, err := state.OpenStorage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, f: f, st: st, work: t.TempDir(), maxPar: maxPar, entries: cacheEntries}
}

// subtask is one operator subtask's keyed state.
type subtask struct {
	i       int
	backend state.KeyedBackend
	kd      *state.Keyed
}

// open opens subtask i of p, restored from md when it is not nil.
func (h *harness) open(p, i int, md *state.Metadata) *subtask {
	h.t.Helper()
	spec := state.KeyedSpec{
		Dir:       h.subtaskWorkDir(p, i),
		KeyGroups: state.RangeFor(h.maxPar, p, i),
	}
	if md != nil {
		_, spec.Restore = h.st.Restore(*md, opUID, p, i)
	}
	b, err := h.f.OpenKeyed(spec)
	if err != nil {
		h.t.Fatalf("open subtask %d of %d: %v", i, p, err)
	}
	return &subtask{i: i, backend: b, kd: state.NewKeyed(state.KeyedConfig{
		Backend: b, KeyGroups: spec.KeyGroups, MaxParallelism: h.maxPar, CacheEntries: h.entries,
	})}
}

// subtaskWorkDir returns a fresh working folder for subtask i of p.
func (h *harness) subtaskWorkDir(p, i int) string {
	h.opened++
	return filepath.Join(h.work, fmt.Sprintf("%d-of-%d.%d", i, p, h.opened))
}

// capture captures every subtask for checkpoint id and returns the persist
// step that completes the checkpoint.
func (h *harness) capture(id barrier.CheckpointID, subs []*subtask) func() state.Metadata {
	h.t.Helper()
	persists := make([]func() ([]state.File, error), len(subs))
	for j, s := range subs {
		dir, err := h.st.SubtaskDir(id, opUID, s.i)
		if err != nil {
			h.t.Fatal(err)
		}
		if persists[j], err = s.kd.Capture(id, dir); err != nil {
			h.t.Fatalf("capture subtask %d: %v", s.i, err)
		}
	}
	return func() state.Metadata {
		op := state.OperatorSnapshot{Parallelism: len(subs)}
		for j, s := range subs {
			files, err := persists[j]()
			if err != nil {
				h.t.Errorf("persist subtask %d: %v", s.i, err)
				continue
			}
			op.Subtasks = append(op.Subtasks, state.SubtaskSnapshot{
				Subtask:   s.i,
				KeyGroups: s.kd.KeyGroups(),
				Files:     state.CheckpointFiles(opUID, s.i, files),
			})
		}
		md := state.Metadata{Job: "test", ID: id, MaxParallelism: h.maxPar,
			Operators: map[string]state.OperatorSnapshot{opUID: op}}
		if _, err := h.st.Complete(md); err != nil {
			h.t.Fatal(err)
		}
		loaded, err := h.st.Load(id)
		if err != nil {
			h.t.Fatalf("load checkpoint %d just completed: %v", id, err)
		}
		return loaded
	}
}

// checkpoint captures and persists every subtask.
func (h *harness) checkpoint(id barrier.CheckpointID, subs ...*subtask) state.Metadata {
	h.t.Helper()
	return h.capture(id, subs)()
}

func (s *subtask) close(t testing.TB) {
	t.Helper()
	if err := s.backend.Close(); err != nil {
		t.Errorf("close subtask %d: %v", s.i, err)
	}
}

// Run runs the conformance suite on f.
func Run(t *testing.T, f state.BackendFactory) {
	t.Run("Model", func(t *testing.T) { testModel(t, f) })
	t.Run("CaptureWhileWriting", func(t *testing.T) { testCaptureWhileWriting(t, f) })
	t.Run("Rescale", func(t *testing.T) { testRescale(t, f) })
	t.Run("CorruptFile", func(t *testing.T) { testCorruptFile(t, f) })
	t.Run("Scan", func(t *testing.T) { testScan(t, f) })
}
