package base

import (
	"encoding/binary"
	"math/bits"
)

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

// Hash64 is XXH64 with seed 0 (the xxHash specification, as
// github.com/cespare/xxhash computes it, written here so that the leaf
// imports only the standard library). Buckets, key groups and fault
// schedules are drawn from it, and buckets are stored: never change it.
func Hash64(b []byte) uint64 {
	n := len(b)
	var h uint64
	if n >= 32 {
		v1, v2, v3, v4 := prime1, prime2, uint64(0), uint64(0)
		v1 += prime2 // wrapping: seed + prime1 + prime2
		v4 -= prime1 // seed - prime1
		for ; len(b) >= 32; b = b[32:] {
			v1 = round(v1, binary.LittleEndian.Uint64(b[0:8]))
			v2 = round(v2, binary.LittleEndian.Uint64(b[8:16]))
			v3 = round(v3, binary.LittleEndian.Uint64(b[16:24]))
			v4 = round(v4, binary.LittleEndian.Uint64(b[24:32]))
		}
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = mergeRound(h, v1)
		h = mergeRound(h, v2)
		h = mergeRound(h, v3)
		h = mergeRound(h, v4)
	} else {
		h = prime5
	}
	h += uint64(n)
	for ; len(b) >= 8; b = b[8:] {
		h ^= round(0, binary.LittleEndian.Uint64(b[:8]))
		h = bits.RotateLeft64(h, 27)*prime1 + prime4
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b[:4])) * prime1
		h = bits.RotateLeft64(h, 23)*prime2 + prime3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * prime5
		h = bits.RotateLeft64(h, 11) * prime1
	}
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

func round(acc, input uint64) uint64 {
	acc += input * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

func mergeRound(acc, val uint64) uint64 {
	acc ^= round(0, val)
	return acc*prime1 + prime4
}
