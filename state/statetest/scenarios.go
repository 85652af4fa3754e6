package statetest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ebbflow/ebbflow/barrier"

	"github.com/ebbflow/ebbflow/state"
)

// testCaptureWhileWriting checks that a snapshot holds exactly the state at
// capture time, although the task goes on writing and flushing while the
// snapshot is persisted.
func testCaptureWhileWriting(t *testing.T, f state.BackendFactory) {
	const n = 2000
	h := newHarness(t, f, state.DefaultMaxParallelism, 0)
	sub := h.open(1, 0, nil)
	vals := state.NewValue(sub.kd, "v", state.CodecFor[int64](), state.CodecFor[int64]())
	for k := range int64(n) {
		must(t, "put", vals.Put(k, k))
	}
	persist := h.capture(1, []*subtask{sub})
	var wg sync.WaitGroup
	var md state.Metadata
	wg.Go(func() { md = persist() })
	for round := range int64(5) {
		for k := range int64(n) {
			if k%2 == 0 {
				must(t, "delete", vals.Delete(k))
			} else {
				must(t, "put", vals.Put(k, -round))
			}
			must(t, "put new", vals.Put(n+k, k))
		}
		must(t, "flush", sub.kd.Flush())
	}
	wg.Wait()
	sub.close(t)

	sub = h.open(1, 0, &md)
	defer sub.close(t)
	vals = state.NewValue(sub.kd, "v", state.CodecFor[int64](), state.CodecFor[int64]())
	for k := range int64(2 * n) {
		v, ok, err := vals.Get(k)
		if k < n && (err != nil || !ok || v != k) {
			t.Fatalf("restored v[%d] = %d, %v, %v; want %d", k, v, ok, err, k)
		}
		if k >= n && (err != nil || ok) {
			t.Fatalf("restored v[%d] = %d, %v, %v; want none (written after capture)", k, v, ok, err)
		}
	}
	if got := countKeys(t, sub); got != n {
		t.Errorf("restored backend holds %d keys, want %d", got, n)
	}
}

func countKeys(t *testing.T, s *subtask) int {
	t.Helper()
	n := 0
	if err := s.backend.Scan(nil, func(k, v []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// testRescale writes state at parallelism 2, each key in the subtask that
// owns its group, and restores it at 3 and at 1 (and from 3 back to 2): every
// key must come back exactly once, in its owner, with its value.
func testRescale(t *testing.T, f state.BackendFactory) {
	const (
		maxPar = 16
		n      = 3000
	)
	h := newHarness(t, f, maxPar, 0)
	type sts struct {
		vals *state.Value[string, int64]
		mps  *state.Map[string, string, string]
	}
	reg := func(s *subtask) sts {
		sc := state.CodecFor[string]()
		return sts{state.NewValue(s.kd, "v", sc, state.CodecFor[int64]()), state.NewMap(s.kd, "m", sc, sc, sc)}
	}
	owner := func(p int, key string) int {
		return state.SubtaskForGroup(maxPar, p, state.KeyGroupOf([]byte(key), maxPar))
	}
	open := func(p int, md *state.Metadata) ([]*subtask, []sts) {
		subs, regs := make([]*subtask, p), make([]sts, p)
		for i := range p {
			subs[i] = h.open(p, i, md)
			regs[i] = reg(subs[i])
		}
		return subs, regs
	}
	// A key of a group the subtask does not own is refused.
	stray := h.open(2, 0, nil)
	strayVals := reg(stray).vals
	notOwned := "key-0"
	for i := 0; owner(2, notOwned) == 0; i++ {
		notOwned = fmt.Sprintf("key-%d", i)
	}
	if _, _, err := strayVals.Get(notOwned); !errors.Is(err, state.ErrNotOwned) {
		t.Errorf("get of a key not owned = %v, want ErrNotOwned", err)
	}
	must(t, "put", strayVals.Put(notOwned, 1))
	if err := stray.kd.Flush(); !errors.Is(err, state.ErrNotOwned) {
		t.Errorf("flush of a key not owned = %v, want ErrNotOwned", err)
	}
	stray.close(t)

	subs, regs := open(2, nil)
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		s := regs[owner(2, key)]
		must(t, "put", s.vals.Put(key, int64(i)))
		must(t, "map put", s.mps.Put(key, "a", key))
		must(t, "map put", s.mps.Put(key, "b", "x"))
		if i%3 == 0 {
			must(t, "flush", subs[owner(2, key)].kd.Flush())
		}
		must(t, "map delete", s.mps.Delete(key, "b"))
	}
	md := h.checkpoint(1, subs...)
	for _, s := range subs {
		s.close(t)
	}

	check := func(p int, md *state.Metadata) state.Metadata {
		t.Helper()
		subs, regs := open(p, md)
		defer func() {
			for _, s := range subs {
				s.close(t)
			}
		}()
		seen := map[string]int{}
		for i, s := range subs {
			err := s.backend.Scan(nil, func(k, _ []byte) error {
				g, name, uk, err := state.ParseBackendKey(k)
				if err != nil {
					return err
				}
				if !s.kd.KeyGroups().Contains(g) {
					t.Errorf("p=%d subtask %d holds group %d, owns %v", p, i, g, s.kd.KeyGroups())
				}
				seen[string(name)+"/"+string(uk)]++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(seen) != 2*n {
			t.Errorf("p=%d: %d distinct backend keys, want %d", p, len(seen), 2*n)
		}
		for k, c := range seen {
			if c != 1 {
				t.Errorf("p=%d: backend key %q held %d times", p, k, c)
			}
		}
		for i := range n {
			key := fmt.Sprintf("key-%d", i)
			s := regs[owner(p, key)]
			v, ok, err := s.vals.Get(key)
			if err != nil || !ok || v != int64(i) {
				t.Fatalf("p=%d: v[%s] = %d, %v, %v; want %d", p, key, v, ok, err, i)
			}
			a, ok, err := s.mps.Get(key, "a")
			if err != nil || !ok || a != key {
				t.Fatalf("p=%d: m[%s][a] = %q, %v, %v", p, key, a, ok, err)
			}
			if l, err := s.mps.Len(key); err != nil || l != 1 {
				t.Fatalf("p=%d: len(m[%s]) = %d, %v; want 1", p, key, l, err)
			}
		}
		return h.checkpoint(md.ID+barrier.CheckpointID(10*p), subs...)
	}
	check(1, &md)
	md3 := check(3, &md)
	check(2, &md3)
}

// testCorruptFile checks that a snapshot file whose bytes or size changed is
// refused with ErrCorrupt and an error naming it.
func testCorruptFile(t *testing.T, f state.BackendFactory) {
	for _, how := range []string{"flip", "truncate", "remove"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t, f, state.DefaultMaxParallelism, 0)
			sub := h.open(1, 0, nil)
			vals := state.NewValue(sub.kd, "v", state.CodecFor[int64](), state.CodecFor[int64]())
			for k := range int64(500) {
				must(t, "put", vals.Put(k, k))
			}
			md := h.checkpoint(1, sub)
			sub.close(t)
			files := md.Operators[opUID].Subtasks[0].Files
			victim := files[0]
			for _, f := range files {
				if f.Size > victim.Size {
					victim = f
				}
			}
			path := filepath.Join(h.st.Path(1), victim.Path)
			switch how {
			case "flip":
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				data[len(data)/2] ^= 0x40
				// Replace rather than write through: the file may be a
				// hard link shared with another folder.
				os.Remove(path)
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
			case "truncate":
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				os.Remove(path)
				if err := os.WriteFile(path, data[:len(data)-1], 0o644); err != nil {
					t.Fatal(err)
				}
			case "remove":
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
			_, restored := h.st.Restore(md, opUID, 1, 0)
			_, err := f.OpenKeyed(state.KeyedSpec{Dir: h.subtaskWorkDir(1, 0), KeyGroups: state.RangeFor(h.maxPar, 1, 0), Restore: restored})
			if !errors.Is(err, state.ErrCorrupt) || !strings.Contains(err.Error(), victim.Path) {
				t.Errorf("open with %s %q = %v, want ErrCorrupt naming the file", how, victim.Path, err)
			}
			if _, err := h.st.Load(1); !errors.Is(err, state.ErrCorrupt) {
				t.Errorf("Load with %s file = %v, want ErrCorrupt", how, err)
			}
		})
	}
}

// testScan checks the backend's ordered prefix scan.
func testScan(t *testing.T, f state.BackendFactory) {
	h := newHarness(t, f, state.DefaultMaxParallelism, 0)
	sub := h.open(1, 0, nil)
	defer sub.close(t)
	var b state.WriteBatch
	keys := []string{"a", "ab", "abc", "b", "\xff", "\xff\xff", "a\xff"}
	for _, k := range keys {
		b.Put([]byte(k), []byte("v"+k))
	}
	b.Del([]byte("abc"))
	if err := sub.backend.Apply(&b); err != nil {
		t.Fatal(err)
	}
	scan := func(prefix string) string {
		var got []string
		err := sub.backend.Scan([]byte(prefix), func(k, v []byte) error {
			if string(v) != "v"+string(k) {
				t.Errorf("value of %q = %q", k, v)
			}
			got = append(got, fmt.Sprintf("%q", k))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, " ")
	}
	for prefix, want := range map[string]string{
		"":     `"a" "ab" "a\xff" "b" "\xff" "\xff\xff"`,
		"a":    `"a" "ab" "a\xff"`,
		"ab":   `"ab"`,
		"\xff": `"\xff" "\xff\xff"`,
		"c":    ``,
	} {
		if got := scan(prefix); got != want {
			t.Errorf("scan %q = %s, want %s", prefix, got, want)
		}
	}
	if v, ok, err := sub.backend.Get([]byte("ab")); err != nil || !ok || string(v) != "vab" {
		t.Errorf("get ab = %q, %v, %v", v, ok, err)
	}
	if _, ok, err := sub.backend.Get([]byte("abc")); err != nil || ok {
		t.Errorf("get deleted abc = %v, %v", ok, err)
	}
}
