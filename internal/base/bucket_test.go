package base

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestHash64Vectors: the xxHash specification's XXH64 values for seed 0.
func TestHash64Vectors(t *testing.T) {
	for in, want := range map[string]uint64{
		"":    0xef46db3751d8e999,
		"a":   0xd24ec4f1a98c6e5b,
		"abc": 0x44bc2cf5ad770999,
		"Nobody inspects the spammish repetition": 0xfbcea83c8a378bf1,
	} {
		if got := Hash64([]byte(in)); got != want {
			t.Errorf("Hash64(%q) = %#x, want %#x", in, got, want)
		}
	}
}

// TestHash64IsXXHash: Hash64 is the hash buckets and key groups were
// computed with before the leaf had its own (github.com/cespare/xxhash,
// the oracle here), at every length around the 4, 8 and 32 byte steps, so
// every stored table keeps its rows in their buckets.
func TestHash64IsXXHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 300)
	for n := 0; n <= len(buf); n++ {
		for range 20 {
			b := buf[:n]
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			if got, want := Hash64(b), xxhash.Sum64(b); got != want {
				t.Fatalf("Hash64(%x) = %#x, xxhash.Sum64 = %#x", b, got, want)
			}
		}
	}
}

// TestBucketOfAndOwner pins the bucket of a documented key (docs/TABLE.md:
// the string key "ada" encodes as 01 03 61 64 61) and that every bucket has
// exactly one owner among p subtasks.
func TestBucketOfAndOwner(t *testing.T) {
	key := []byte{0x01, 0x03, 'a', 'd', 'a'}
	for _, buckets := range []int{1, 4, 16, 1000} {
		if got, want := BucketOf(key, buckets), int(xxhash.Sum64(key)%uint64(buckets)); got != want {
			t.Errorf("BucketOf(ada, %d) = %d, want %d", buckets, got, want)
		}
	}
	for p := 1; p <= 5; p++ {
		for b := range 20 {
			if o := Owner(b, p); o < 0 || o >= p || o != b%p {
				t.Errorf("Owner(%d, %d) = %d", b, p, o)
			}
		}
	}
}
