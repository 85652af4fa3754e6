package base

import "testing"

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

// TestBucketOfAndOwner pins the bucket of a documented key (docs/TABLE.md:
// the string key "ada" encodes as 01 03 61 64 61) and that every bucket has
// exactly one owner among p subtasks.
func TestBucketOfAndOwner(t *testing.T) {
	key := []byte{0x01, 0x03, 'a', 'd', 'a'}
	// Stored tables hold their rows in these buckets: the values are pinned.
	for buckets, want := range map[int]int{1: 0, 4: 0, 16: 8, 1000: 496} {
		if got := BucketOf(key, buckets); got != want {
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
