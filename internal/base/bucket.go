package base

import "github.com/cespare/xxhash/v2"

// BucketOf returns the bucket of an encoded primary key (see
// sink/aggmerge/encoding.AppendKey): Hash64 of the encoded key, modulo the
// bucket count. Rows are stored by it: never change it.
func BucketOf(encodedKey []byte, buckets int) int {
	return int(Hash64(encodedKey) % uint64(buckets))
}

// Owner is the subtask of parallelism p that owns bucket b: b mod p. It is
// the one function used for the sink's shuffle (runtime.PartitionBy), the
// buckets a writer subtask owns, baselines, undo and rescale.
func Owner(bucket, parallelism int) int { return bucket % parallelism }

// Hash64 is XXH64 with seed 0 (github.com/cespare/xxhash). Buckets, key
// groups and fault schedules are drawn from it, and buckets are stored:
// never change it.
func Hash64(b []byte) uint64 { return xxhash.Sum64(b) }
