package state

import (
	"errors"
	"testing"
	"testing/synctest"
)

// gatedBackend holds Apply until released, and can fail it.
type gatedBackend struct {
	KeyedBackend
	release chan struct{}
	fail    error
}

func (g *gatedBackend) Apply(b *WriteBatch) error {
	<-g.release
	if g.fail != nil {
		return g.fail
	}
	return g.KeyedBackend.Apply(b)
}

func newGated(t *testing.T, cache int) (*Keyed, *gatedBackend) {
	t.Helper()
	b, err := NewMemoryFactory().OpenKeyed(KeyedSpec{KeyGroups: RangeFor(DefaultMaxParallelism, 1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedBackend{KeyedBackend: b, release: make(chan struct{})}
	return NewKeyed(KeyedConfig{Backend: g, KeyGroups: RangeFor(DefaultMaxParallelism, 1, 0), CacheEntries: cache}), g
}

// TestCaptureAppliesOffTheTask: Capture returns before its batch reaches the
// backend; meanwhile the task reads and writes from the cache, a Flush waits
// for the batch, and in the end the backend holds the latest values. It runs
// in a synctest bubble: "returned" and "still waiting" are checked once
// every goroutine is blocked, not after a guess at how long is long enough.
func TestCaptureAppliesOffTheTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kd, g := newGated(t, 1000)
		vals := NewValue(kd, "v", IntCodec{}, IntCodec{})
		for k := range 100 {
			if err := vals.Put(k, k); err != nil {
				t.Fatal(err)
			}
		}
		// Capture must return while Apply is held: it must not apply itself.
		type captured struct {
			persist func() ([]File, error)
			err     error
		}
		got := make(chan captured, 1)
		dir := t.TempDir()
		go func() {
			p, err := kd.Capture(1, dir)
			got <- captured{p, err}
		}()
		synctest.Wait()
		var c captured
		select {
		case c = <-got:
		default:
			close(g.release) // let the stuck Capture end
			t.Fatal("Capture waited for the backend: the barrier's flush is not off the task")
		}
		persist, err := c.persist, c.err
		if err != nil {
			t.Fatal(err)
		}
		persisted := make(chan error, 1)
		go func() { _, err := persist(); persisted <- err }()
		// The batch is held in Apply: the task goes on against the cache.
		for k := range 100 {
			if v, ok, err := vals.Get(k); err != nil || !ok || v != k {
				t.Fatalf("v[%d] = %d %v %v during the apply", k, v, ok, err)
			}
			if err := vals.Put(k, k+1000); err != nil {
				t.Fatal(err)
			}
		}
		flushed := make(chan error, 1)
		go func() { flushed <- kd.Flush() }()
		synctest.Wait()
		select {
		case <-flushed:
			close(g.release)
			t.Fatal("Flush did not wait for the batch in flight")
		default:
		}
		close(g.release)
		if err := <-persisted; err != nil {
			t.Fatal(err)
		}
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		for k := range 100 {
			raw, ok, err := g.KeyedBackend.Get(AppendBackendKey(nil, KeyGroupOf(IntCodec{}.Append(nil, k), DefaultMaxParallelism), "v", IntCodec{}.Append(nil, k)))
			if err != nil || !ok {
				t.Fatalf("backend lacks key %d: %v", k, err)
			}
			if v, _ := (IntCodec{}).Decode(raw); v != k+1000 {
				t.Fatalf("backend holds %d for key %d, want %d", v, k, k+1000)
			}
		}
	})
}

// TestFailedApplyFailsLater: when the batch of a Capture cannot be applied,
// the cache is ahead of the backend; every later Flush and Capture fails.
func TestFailedApplyFailsLater(t *testing.T) {
	kd, g := newGated(t, 1000)
	vals := NewValue(kd, "v", IntCodec{}, IntCodec{})
	if err := vals.Put(1, 1); err != nil {
		t.Fatal(err)
	}
	g.fail = errors.New("disk full")
	close(g.release)
	persist, err := kd.Capture(1, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := persist(); err == nil {
		t.Fatal("persist of a failed apply succeeded")
	}
	if err := kd.Flush(); err == nil || !errors.Is(err, g.fail) {
		t.Fatalf("Flush after a failed apply: %v, want the apply's error", err)
	}
	if _, err := kd.Capture(2, t.TempDir()); err == nil {
		t.Fatal("Capture after a failed apply succeeded")
	}
}

// TestCompleteCacheDeleteBeforeApply: in a complete cache (LoadAll), a
// delete captured for a checkpoint leaves the cache at once, while the
// backend still holds the value until the persist applies the batch: a Get
// in between must answer from the cache's completeness (no value), never
// from the backend behind it.
func TestCompleteCacheDeleteBeforeApply(t *testing.T) {
	kd, g := newGated(t, 1000)
	vals := NewValue(kd, "v", IntCodec{}, IntCodec{})
	if err := vals.Put(1, 10); err != nil {
		t.Fatal(err)
	}
	close(g.release) // this flush and the persist below apply at once
	if err := kd.Flush(); err != nil {
		t.Fatal(err)
	}
	g.release = make(chan struct{})

	restored := NewKeyed(KeyedConfig{Backend: g, KeyGroups: RangeFor(DefaultMaxParallelism, 1, 0), CacheEntries: 1000})
	vals = NewValue(restored, "v", IntCodec{}, IntCodec{})
	if err := vals.LoadAll(func(int, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := vals.Delete(1); err != nil {
		t.Fatal(err)
	}
	persist, err := restored.Capture(1, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := vals.Get(1); err != nil || ok {
		t.Fatalf("v[1] = %d, %v, %v while the captured delete is not applied; want no value", v, ok, err)
	}
	close(g.release)
	if _, err := persist(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := g.KeyedBackend.Get(AppendBackendKey(nil, KeyGroupOf(IntCodec{}.Append(nil, 1), DefaultMaxParallelism), "v", IntCodec{}.Append(nil, 1))); err != nil || ok {
		t.Fatalf("the backend still holds v[1] after the persist (%v, %v)", ok, err)
	}
}
