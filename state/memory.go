package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/ebbflow/ebbflow/barrier"
)

// memoryFile is the one file a memory backend snapshot consists of: a magic
// line, then (uvarint key length, key, uvarint value length, value) per entry
// in key order. Its integrity is checked by the size and CRC-32C recorded in
// the checkpoint metadata.
const memoryFile = "keyed.mem"

var memoryMagic = []byte("ebbflow-memstate-1\n")

// NewMemoryFactory returns a BackendFactory keeping state in a sorted slice
// in memory. It suits tests and small state: every Apply rebuilds the slice,
// and every checkpoint writes the whole state to one file.
func NewMemoryFactory() BackendFactory { return memoryFactory{} }

type memoryFactory struct{}

type memEntry struct{ key, val []byte }

// memoryBackend publishes its entries as an immutable sorted slice: Apply
// builds a new one, so Capture only keeps a reference to the current one and
// persist may read it on another goroutine, and readers on one goroutine may
// run while Apply runs on another (Keyed applies its barrier flush
// asynchronously).
type memoryBackend struct {
	entries []memEntry // while opening; then only through mu
	mu      struct {
		sync.RWMutex
		entries []memEntry
	}
}

// current returns the published entries; they never change.
func (b *memoryBackend) current() []memEntry {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.mu.entries
}

func (memoryFactory) OpenKeyed(spec KeyedSpec) (KeyedBackend, error) {
	b := &memoryBackend{}
	for _, r := range spec.Restore {
		if err := b.restore(r, spec.KeyGroups); err != nil {
			return nil, fmt.Errorf("restore memory state of subtask %d from %q: %w", r.Snapshot.Subtask, r.CheckpointDir, err)
		}
	}
	slices.SortFunc(b.entries, func(x, y memEntry) int { return bytes.Compare(x.key, y.key) })
	for i := 1; i < len(b.entries); i++ {
		if bytes.Equal(b.entries[i-1].key, b.entries[i].key) {
			return nil, fmt.Errorf("restore memory state: key %x in two snapshots: %w", b.entries[i].key, ErrCorrupt)
		}
	}
	b.mu.entries, b.entries = b.entries, nil
	return b, nil
}

func (b *memoryBackend) restore(r Restored, owned KeyGroupRange) error {
	if err := VerifyFiles(r.CheckpointDir, r.Snapshot.Files); err != nil {
		return err
	}
	var path string
	for _, f := range r.Snapshot.Files {
		if filepath.Base(f.Path) == memoryFile {
			path = filepath.Join(r.CheckpointDir, f.Path)
		}
	}
	if path == "" {
		return fmt.Errorf("no %s in snapshot: %w", memoryFile, ErrCorrupt)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rest, ok := bytes.CutPrefix(data, memoryMagic)
	if !ok {
		return fmt.Errorf("file %q: bad magic: %w", path, ErrCorrupt)
	}
	for len(rest) > 0 {
		var k, v []byte
		if k, rest, ok = cutUvarintBytes(rest); ok {
			v, rest, ok = cutUvarintBytes(rest)
		}
		if !ok {
			return fmt.Errorf("file %q: truncated entry: %w", path, ErrCorrupt)
		}
		if g, ok := GroupOfBackendKey(k); ok && owned.Contains(g) {
			b.entries = append(b.entries, memEntry{key: k, val: v})
		}
	}
	return nil
}

// cutUvarintBytes reads a uvarint length and that many bytes.
func cutUvarintBytes(src []byte) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(src)
	if w <= 0 || n > uint64(len(src)-w) {
		return nil, nil, false
	}
	end := w + int(n)
	return src[w:end:end], src[end:], true
}

func (b *memoryBackend) Get(key []byte) ([]byte, bool, error) {
	entries := b.current()
	i, ok := sort.Find(len(entries), func(i int) int { return bytes.Compare(key, entries[i].key) })
	if !ok {
		return nil, false, nil
	}
	return bytes.Clone(entries[i].val), true, nil
}

func (b *memoryBackend) Apply(wb *WriteBatch) error {
	if len(wb.Ops) == 0 {
		return nil
	}
	// Copy the batch (its bytes belong to the caller) into one buffer, sort
	// it, and keep the last op of each key.
	size := 0
	for _, op := range wb.Ops {
		size += len(op.Key) + len(op.Value)
	}
	buf := make([]byte, 0, size)
	ops := make([]WriteOp, len(wb.Ops))
	for i, op := range wb.Ops {
		buf = append(buf, op.Key...)
		k := buf[len(buf)-len(op.Key):]
		buf = append(buf, op.Value...)
		ops[i] = WriteOp{Key: k, Value: buf[len(buf)-len(op.Value):], Delete: op.Delete}
	}
	slices.SortStableFunc(ops, func(x, y WriteOp) int { return bytes.Compare(x.Key, y.Key) })
	old := b.current()
	merged := make([]memEntry, 0, len(old)+len(ops))
	for i := 0; i < len(ops); i++ {
		op := ops[i]
		if i+1 < len(ops) && bytes.Equal(op.Key, ops[i+1].Key) {
			continue
		}
		for len(old) > 0 && bytes.Compare(old[0].key, op.Key) < 0 {
			merged = append(merged, old[0])
			old = old[1:]
		}
		if len(old) > 0 && bytes.Equal(old[0].key, op.Key) {
			old = old[1:]
		}
		if !op.Delete {
			merged = append(merged, memEntry{key: op.Key, val: op.Value})
		}
	}
	merged = append(merged, old...)
	b.mu.Lock()
	b.mu.entries = merged
	b.mu.Unlock()
	return nil
}

func (b *memoryBackend) Scan(prefix []byte, fn func(k, v []byte) error) error {
	entries := b.current()
	i := sort.Search(len(entries), func(i int) bool { return bytes.Compare(entries[i].key, prefix) >= 0 })
	for ; i < len(entries) && bytes.HasPrefix(entries[i].key, prefix); i++ {
		if err := fn(entries[i].key, entries[i].val); err != nil {
			return err
		}
	}
	return nil
}

func (b *memoryBackend) Capture(_ barrier.CheckpointID, dir string) (func() ([]File, error), error) {
	entries := b.current()
	return func() ([]File, error) {
		size, crc, err := WriteFileAtomic(filepath.Join(dir, memoryFile), func(w io.Writer) error {
			if _, err := w.Write(memoryMagic); err != nil {
				return err
			}
			var hdr []byte
			for _, e := range entries {
				hdr = binary.AppendUvarint(hdr[:0], uint64(len(e.key)))
				hdr = append(hdr, e.key...)
				hdr = binary.AppendUvarint(hdr, uint64(len(e.val)))
				hdr = append(hdr, e.val...)
				if _, err := w.Write(hdr); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("persist memory state: %w", err)
		}
		return []File{{Path: memoryFile, Size: size, CRC32C: crc}}, nil
	}, nil
}

func (b *memoryBackend) Close() error {
	b.mu.Lock()
	b.mu.entries = nil
	b.mu.Unlock()
	return nil
}
