package state

import (
	"errors"

	"github.com/ebbflow/ebbflow/barrier"
)

// DefaultMaxParallelism is the number of key groups of a job unless set: the
// largest parallelism any keyed operator of the job can be rescaled to.
const DefaultMaxParallelism = 128

// ErrCorrupt marks a checkpoint file or state entry whose bytes do not match
// their checksum or cannot be decoded.
var ErrCorrupt = errors.New("state: corrupt")

// KeyGroupRange is the half-open range [Start, End) of key groups a keyed
// subtask owns.
type KeyGroupRange struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Contains reports whether group g is in r.
func (r KeyGroupRange) Contains(g int) bool { return g >= r.Start && g < r.End }

// Overlaps reports whether r and o share a group.
func (r KeyGroupRange) Overlaps(o KeyGroupRange) bool { return r.Start < o.End && o.Start < r.End }

// Empty reports whether r has no groups.
func (r KeyGroupRange) Empty() bool { return r.End <= r.Start }

// RangeFor returns the key groups subtask i of p owns, out of maxParallelism:
// [ceil(i*max/p), ceil((i+1)*max/p)), as Flink does. Every group is owned by
// exactly one subtask, none is empty while p <= max, and the rounding up makes
// SubtaskForGroup its exact inverse.
func RangeFor(maxParallelism, parallelism, i int) KeyGroupRange {
	ceil := func(j int) int { return (j*maxParallelism + parallelism - 1) / parallelism }
	return KeyGroupRange{Start: ceil(i), End: ceil(i + 1)}
}

// SubtaskForGroup is the inverse of RangeFor: the subtask of p owning group g.
func SubtaskForGroup(maxParallelism, parallelism, g int) int {
	return g * parallelism / maxParallelism
}

// WriteBatch is a set of puts and deletes applied atomically to a
// KeyedBackend. It is reused across flushes: Reset keeps its memory.
type WriteBatch struct {
	Ops []WriteOp
}

// WriteOp is one put (Delete false) or delete of a backend key.
type WriteOp struct {
	Key, Value []byte
	Delete     bool
}

// Put appends a put. The caller must not modify key or value until the batch
// is applied.
func (b *WriteBatch) Put(key, value []byte) { b.Ops = append(b.Ops, WriteOp{Key: key, Value: value}) }

// Del appends a delete.
func (b *WriteBatch) Del(key []byte) { b.Ops = append(b.Ops, WriteOp{Key: key, Delete: true}) }

// Reset empties the batch.
func (b *WriteBatch) Reset() { b.Ops = b.Ops[:0] }

// KeyedBackend stores the keyed state of one operator subtask as ordered
// byte keys. Backend keys start with the 2-byte big-endian key group, so the
// groups of a range are contiguous. A KeyedBackend is used by one goroutine
// at a time (the task's), except that a Persist returned by Capture may run on
// another goroutine while the task goes on.
type KeyedBackend interface {
	// Get returns a copy of the value of key.
	Get(key []byte) (value []byte, ok bool, err error)
	// Apply commits the batch atomically, without fsync: durability comes from
	// checkpoints. It must not keep the batch's slices: the caller reuses them.
	Apply(b *WriteBatch) error
	// Scan calls fn for every key with the prefix, in key order, on a
	// consistent view. k and v are valid only during the call.
	Scan(prefix []byte, fn func(k, v []byte) error) error
	// Capture takes, synchronously, a consistent copy of the state for
	// checkpoint id into dir (an empty folder inside the checkpoint). The
	// returned persist finishes the copy (fsync, checksums) and may run
	// concurrently with later Get/Apply calls; it returns the files written,
	// with paths relative to dir (CheckpointFiles makes them relative to the
	// checkpoint folder, as SubtaskSnapshot records them).
	Capture(id barrier.CheckpointID, dir string) (persist func() ([]File, error), err error)
	// Close releases the backend; the working copy may be deleted.
	Close() error
}

// File is one file of a subtask snapshot, as recorded in the checkpoint
// metadata: its path relative to the checkpoint folder, size and CRC-32C.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

// BackendFactory opens the keyed backend of one operator subtask. The runtime
// holds one and never knows which store is behind it.
type BackendFactory interface {
	OpenKeyed(spec KeyedSpec) (KeyedBackend, error)
}

// KeyedSpec says where a subtask's keyed state lives and what it restores.
type KeyedSpec struct {
	// Dir is a working folder owned by this subtask alone; the backend may
	// delete and recreate it.
	Dir string
	// KeyGroups is the range the subtask owns; restored keys outside it are
	// dropped.
	KeyGroups KeyGroupRange
	// Restore lists the snapshots whose key groups overlap KeyGroups (empty on
	// a fresh start).
	Restore []Restored
}

// Restored is one subtask snapshot to rebuild state from.
type Restored struct {
	// CheckpointDir is the checkpoint folder that Snapshot.Files are relative to.
	CheckpointDir string
	Snapshot      SubtaskSnapshot
}
