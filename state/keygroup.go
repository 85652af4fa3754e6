package state

import (
	"encoding/binary"
	"fmt"

	"github.com/ebbflow/ebbflow/internal/base"
)

// MaxKeyGroups bounds maxParallelism: the key group is stored in 2 bytes.
const MaxKeyGroups = 1 << 16

// KeyGroupOf returns the key group of a key given its encoded bytes (as its
// Codec appends them): xxhash64(encodedKey) mod maxParallelism (base.Hash64,
// the hash of table buckets). The runtime's
// keyBy partitioner calls exactly this, then SubtaskForGroup, so a key's
// records and its state meet in the same subtask at any parallelism.
func KeyGroupOf(encodedKey []byte, maxParallelism int) int {
	return int(base.Hash64(encodedKey) % uint64(maxParallelism))
}

// Backend keys are laid out as
//
//	[key group: 2 bytes big-endian][len(state name): 1 byte][state name][encoded user key]
//
// so the keys of one group are contiguous (restore keeps or drops whole
// ranges) and, inside a group, the keys of one state share a prefix.

// AppendStatePrefix appends the backend key prefix of state name in group g.
func AppendStatePrefix(dst []byte, g int, name string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(g))
	dst = append(dst, byte(len(name)))
	return append(dst, name...)
}

// AppendBackendKey appends the backend key of userKey in state name, group g.
func AppendBackendKey(dst []byte, g int, name string, userKey []byte) []byte {
	return append(AppendStatePrefix(dst, g, name), userKey...)
}

// ParseBackendKey splits a backend key into its group, state name and user
// key (the last two alias k).
func ParseBackendKey(k []byte) (g int, name, userKey []byte, err error) {
	if len(k) < 3 || len(k) < 3+int(k[2]) {
		return 0, nil, nil, fmt.Errorf("parse backend key %x: %w", k, ErrCorrupt)
	}
	n := int(k[2])
	return int(binary.BigEndian.Uint16(k)), k[3 : 3+n], k[3+n:], nil
}

// GroupOfBackendKey returns the key group a backend key belongs to.
func GroupOfBackendKey(k []byte) (int, bool) {
	if len(k) < 2 {
		return 0, false
	}
	return int(binary.BigEndian.Uint16(k)), true
}

// GroupBounds returns the backend key range [lo, hi) that holds groups
// [r.Start, r.End); hi is nil when the range runs to the last possible group.
func GroupBounds(r KeyGroupRange) (lo, hi []byte) {
	lo = binary.BigEndian.AppendUint16(nil, uint16(r.Start))
	if r.End < MaxKeyGroups {
		hi = binary.BigEndian.AppendUint16(nil, uint16(r.End))
	}
	return lo, hi
}
