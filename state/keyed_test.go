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

// countingBackend counts the point reads of a backend.
type countingBackend struct {
	KeyedBackend
	gets int
}

func (b *countingBackend) Get(key []byte) ([]byte, bool, error) {
	b.gets++
	return b.KeyedBackend.Get(key)
}

// TestLoadAllComplete: after LoadAll of a state that fits the cache, Get
// answers every key from the cache, with or without a value, reading
// nothing from the backend, also after deletes and checkpoints (the
// flushed deletes leave the cache); once the cache evicts a value, a Get
// reads the backend again and still sees every value.
func TestLoadAllComplete(t *testing.T) {
	const cache = 64
	groups := RangeFor(DefaultMaxParallelism, 1, 0)
	mem, err := NewMemoryFactory().OpenKeyed(KeyedSpec{KeyGroups: groups})
	if err != nil {
		t.Fatal(err)
	}
	b := &countingBackend{KeyedBackend: mem}
	open := func() (*Keyed, *Value[int, int]) {
		kd := NewKeyed(KeyedConfig{Backend: b, KeyGroups: groups, CacheEntries: cache})
		return kd, NewValue(kd, "v", IntCodec{}, IntCodec{})
	}
	kd, vals := open()
	for k := range 10 {
		if err := vals.Put(k, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := kd.Flush(); err != nil {
		t.Fatal(err)
	}

	kd, vals = open() // a restore: the values are in the backend only
	loaded := 0
	if err := vals.LoadAll(func(k, v int) error {
		loaded++
		if v != k {
			t.Errorf("loaded v[%d] = %d", k, v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if loaded != 10 {
		t.Fatalf("LoadAll read %d values, want 10", loaded)
	}
	get := func(k, want int, found bool) {
		t.Helper()
		if v, ok, err := vals.Get(k); err != nil || ok != found || (ok && v != want) {
			t.Fatalf("v[%d] = %d, %v, %v; want %d, %v", k, v, ok, err, want, found)
		}
	}
	for round := range 3 {
		for k := range 20 { // 10..19 have no value yet
			get(k, k+round, k < 10)
		}
		for k := range 10 {
			if err := vals.Put(k, k+round+1); err != nil {
				t.Fatal(err)
			}
			if err := vals.Delete(10 + k); err != nil {
				t.Fatal(err)
			}
		}
		if err := kd.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if b.gets != 0 {
		t.Fatalf("%d backend reads with a complete cache, want none", b.gets)
	}
	if n := kd.CachedEntries(); n != 10 {
		t.Errorf("%d cached entries, want the 10 values (flushed deletes are not kept)", n)
	}

	for k := 100; k < 100+2*cache; k++ { // overflows the cache: it evicts values
		if err := vals.Put(k, k); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 10 {
		get(k, k+3, true)
	}
	get(10, 0, false)
	if b.gets == 0 {
		t.Error("no backend read after the cache evicted values: Get would miss evicted values")
	}
}
