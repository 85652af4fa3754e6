package state

import (
	"errors"
	"fmt"
	"testing"
)

func newTestKeyed(t *testing.T, cache int) *Keyed {
	t.Helper()
	b, err := NewMemoryFactory().OpenKeyed(KeyedSpec{KeyGroups: RangeFor(DefaultMaxParallelism, 1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return NewKeyed(KeyedConfig{Backend: b, KeyGroups: RangeFor(DefaultMaxParallelism, 1, 0), CacheEntries: cache})
}

// TestCacheBounded writes and reads far more keys than the cache holds: the
// cache stays within its bound and no write is lost to eviction.
func TestCacheBounded(t *testing.T) {
	const keys, cache = 5000, 100
	kd := newTestKeyed(t, cache)
	vals := NewValue(kd, "v", IntCodec{}, IntCodec{})
	for round := range 3 {
		for k := range keys {
			if err := vals.Put(k, k*round); err != nil {
				t.Fatal(err)
			}
			if n := kd.CachedEntries(); n > cache {
				t.Fatalf("%d cached entries, bound %d", n, cache)
			}
		}
	}
	for k := range keys {
		if v, ok, err := vals.Get(k); err != nil || !ok || v != 2*k {
			t.Fatalf("v[%d] = %d, %v, %v; want %d", k, v, ok, err, 2*k)
		}
		if n := kd.CachedEntries(); n > cache {
			t.Fatalf("%d cached entries, bound %d", n, cache)
		}
	}
	if n := len(vals.t.m); n > cache || n != kd.CachedEntries() {
		t.Errorf("table holds %d entries, Keyed counts %d, bound %d", n, kd.CachedEntries(), cache)
	}
}

// TestMapLargerThanCache checks that a map state whose key holds more user
// entries than the cache bound still reads back every entry.
func TestMapLargerThanCache(t *testing.T) {
	kd := newTestKeyed(t, 16)
	m := NewMap(kd, "m", StringCodec{}, IntCodec{}, StringCodec{})
	for i := range 50 {
		if err := m.Put("k", i, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Delete("k", 7); err != nil {
		t.Fatal(err)
	}
	if err := kd.Flush(); err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	if err := m.Range("k", func(uk int, v string) bool { got[uk] = v; return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 49 || got[7] != "" || got[49] != "49" {
		t.Errorf("map of k = %v, want 0..49 without 7", got)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	kd := newTestKeyed(t, 0)
	NewValue(kd, "v", IntCodec{}, IntCodec{})
	defer func() {
		if recover() == nil {
			t.Error("registering state v twice did not panic")
		}
	}()
	NewList(kd, "v", IntCodec{}, IntCodec{})
}

// TestCorruptValue checks that an undecodable stored value is an error.
func TestCorruptValue(t *testing.T) {
	kd := newTestKeyed(t, 0)
	vals := NewValue(kd, "v", StringCodec{}, Int64Codec{})
	var b WriteBatch
	enc := StringCodec{}.Append(nil, "k")
	b.Put(AppendBackendKey(nil, KeyGroupOf(enc, DefaultMaxParallelism), "v", enc), []byte{1, 2, 3})
	if err := kd.backend.Apply(&b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := vals.Get("k"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Get of a 3-byte int64 = %v, want ErrCorrupt", err)
	}
}

// TestHotPathAllocs checks that Get and Put of a cached key, and Add of a
// reducing state, allocate nothing.
func TestHotPathAllocs(t *testing.T) {
	kd := newTestKeyed(t, 0)
	vals := NewValue(kd, "v", StringCodec{}, Int64Codec{})
	sums := NewReducing(kd, "s", StringCodec{}, Int64Codec{}, func(a, b int64) int64 { return a + b })
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		vals.Put(k, 1)
		sums.Add(k, 1)
	}
	if err := kd.Flush(); err != nil {
		t.Fatal(err)
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		k := keys[i%len(keys)]
		i++
		v, _, _ := vals.Get(k)
		vals.Put(k, v+1)
		sums.Add(k, v)
	})
	if allocs != 0 {
		t.Errorf("hot path allocates %.1f times per record", allocs)
	}
}

// TestValueScan: Scan sees every key with a value, the cached unflushed ones
// included, deletes not, and no key of another state with a longer name.
func TestValueScan(t *testing.T) {
	kd := newTestKeyed(t, 1000)
	vals := NewValue(kd, "v", IntCodec{}, IntCodec{})
	other := NewValue(kd, "vv", IntCodec{}, IntCodec{})
	for k := range 100 {
		if err := vals.Put(k, 10*k); err != nil {
			t.Fatal(err)
		}
		if err := other.Put(k, -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := kd.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := vals.Delete(3); err != nil { // dirty in the cache only
		t.Fatal(err)
	}
	if err := vals.Put(200, 2000); err != nil {
		t.Fatal(err)
	}
	got := map[int]int{}
	if err := vals.Scan(func(k, v int) error { got[k] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 || got[200] != 2000 || got[50] != 500 {
		t.Fatalf("scan found %d keys (200: %d, 50: %d), want 100 with 200 and without 3", len(got), got[200], got[50])
	}
	if _, ok := got[3]; ok {
		t.Fatal("scan found the deleted key 3")
	}
}
