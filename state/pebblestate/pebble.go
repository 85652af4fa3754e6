package pebblestate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/state"
)

// snapshotDir is the folder, inside a subtask's checkpoint folder, that the
// pebble checkpoint is written to (pebble wants to create it itself).
const snapshotDir = "pebble"

// batchEntryOverhead is what a pebble batch adds to each key and value
// (kind byte and two length varints, at most), so the batch is sized once.
const batchEntryOverhead = 1 + 2*binary.MaxVarintLen32

// Options tunes the DBs of a factory. The cache in front of the state means
// the DB is mostly written and rarely read: a moderate block cache, and
// memtables large enough that the writes between two checkpoints (each
// flushes the memtable) are flushed as one sstable.
type Options struct {
	// CacheSize is the block cache of each DB in bytes (default 32 MiB).
	CacheSize int64
	// MemTableSize is the size of each memtable in bytes (default 32 MiB).
	MemTableSize uint64
	// Logger receives pebble's messages (default: discarded).
	Logger *slog.Logger
}

// NewFactory returns a state.BackendFactory opening one pebble DB per subtask.
func NewFactory(opts Options) state.BackendFactory {
	if opts.CacheSize <= 0 {
		opts.CacheSize = 32 << 20
	}
	if opts.MemTableSize == 0 {
		opts.MemTableSize = 32 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &factory{opts: opts}
}

type factory struct {
	opts Options
}

// pebbleOptions returns the options of one DB, with its own cache (released
// with the DB).
func (f *factory) pebbleOptions(readOnly bool) *pebble.Options {
	po := &pebble.Options{
		Cache:                       pebble.NewCache(f.opts.CacheSize),
		MemTableSize:                f.opts.MemTableSize,
		MemTableStopWritesThreshold: 4,
		FormatMajorVersion:          pebble.FormatNewest,
		// The working DB is thrown away on every restart: durability comes
		// from checkpoints, which flush the memtable first.
		DisableWAL: true,
		Logger:     logger{f.opts.Logger},
		ReadOnly:   readOnly,
		// Corruption that pebble finds is returned by the read that found
		// it (see pebbleErr), not a fatal error ending the process.
		EventListener: &pebble.EventListener{
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				f.opts.Logger.Error("pebble state: corrupt file", "file", info.Path, "err", info.Details.Error())
			},
		},
	}
	// Every checkpoint flushes an sstable and the compactions that follow
	// rewrite the state: their CPU competes with the tasks, and compressing
	// small values saves little disk for it.
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	return po
}

// open opens the DB in dir and releases the reference to its cache (the DB
// keeps its own).
func (f *factory) open(dir string, readOnly bool) (*pebble.DB, error) {
	po := f.pebbleOptions(readOnly)
	defer po.Cache.Unref()
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("open pebble %q: %w", dir, err)
	}
	return db, nil
}

type backend struct {
	db      *pebble.DB
	dir     string // working folder, removed on Close
	orderer orderer
	// crcs remembers the size and checksum of immutable files (sstables,
	// blob files) by name, so each persist reads only the new ones.
	crcs struct {
		sync.Mutex
		m map[string]state.File
	}
}

func (f *factory) OpenKeyed(spec state.KeyedSpec) (state.KeyedBackend, error) {
	if err := os.RemoveAll(spec.Dir); err != nil {
		return nil, fmt.Errorf("clear state folder: %w", err)
	}
	if err := os.MkdirAll(spec.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create state folder: %w", err)
	}
	db, err := f.restore(spec)
	if err != nil {
		os.RemoveAll(spec.Dir)
		return nil, err
	}
	b := &backend{db: db, dir: spec.Dir}
	b.crcs.m = map[string]state.File{}
	return b, nil
}

func (b *backend) Get(key []byte) ([]byte, bool, error) {
	v, closer, err := b.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("pebble get: %w", pebbleErr(err))
	}
	v = bytes.Clone(v)
	return v, true, closer.Close()
}

// Apply writes the operations in key order (see orderer).
func (b *backend) Apply(wb *state.WriteBatch) error {
	size := 0
	for _, op := range wb.Ops {
		size += len(op.Key) + len(op.Value) + batchEntryOverhead
	}
	batch := b.db.NewBatchWithSize(size)
	defer batch.Close()
	for _, i := range b.orderer.order(wb.Ops) {
		op := &wb.Ops[i]
		var err error
		if op.Delete {
			err = batch.Delete(op.Key, nil)
		} else {
			err = batch.Set(op.Key, op.Value, nil)
		}
		if err != nil {
			return fmt.Errorf("pebble batch: %w", err)
		}
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("pebble commit: %w", err)
	}
	return nil
}

func (b *backend) Scan(prefix []byte, fn func(k, v []byte) error) error {
	return scan(b.db, prefix, prefixEnd(prefix), fn)
}

// scan calls fn for every key in [lo, hi) (hi nil: no upper bound).
func scan(r pebble.Reader, lo, hi []byte, fn func(k, v []byte) error) error {
	if len(lo) == 0 {
		// An empty, non-nil bound panics in pebble's invariant checks
		// (race builds): no bound is nil.
		lo = nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("pebble iterator: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key(), v)
		}
		if err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("pebble scan: %w", pebbleErr(err))
	}
	return nil
}

// pebbleErr marks the corruption pebble reports as state.ErrCorrupt.
func pebbleErr(err error) error {
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("%w: %w", state.ErrCorrupt, err)
	}
	return err
}

// prefixEnd returns the smallest key greater than every key with prefix, or
// nil when there is none.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// Capture flushes the memtable (there is no WAL to copy) and hard-links the
// DB's files into dir.
func (b *backend) Capture(id barrier.CheckpointID, dir string) (func() ([]state.File, error), error) {
	if err := b.db.Flush(); err != nil {
		return nil, fmt.Errorf("pebble flush for checkpoint %d: %w", id, err)
	}
	if err := b.db.Checkpoint(filepath.Join(dir, snapshotDir)); err != nil {
		return nil, fmt.Errorf("pebble checkpoint %d: %w", id, err)
	}
	return func() ([]state.File, error) { return b.persist(dir) }, nil
}

// persist lists the checkpoint's files with their sizes and checksums.
func (b *backend) persist(dir string) ([]state.File, error) {
	ents, err := os.ReadDir(filepath.Join(dir, snapshotDir))
	if err != nil {
		return nil, fmt.Errorf("list pebble checkpoint: %w", err)
	}
	files := make([]state.File, 0, len(ents))
	seen := make(map[string]state.File, len(ents))
	for _, e := range ents {
		rel := filepath.Join(snapshotDir, e.Name())
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("pebble checkpoint holds %q, not a regular file", rel)
		}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("stat %q: %w", rel, err)
		}
		f, ok := b.cachedCRC(e.Name(), info)
		if !ok {
			size, crc, err := state.Checksum(filepath.Join(dir, rel))
			if err != nil {
				return nil, fmt.Errorf("checksum pebble checkpoint: %w", err)
			}
			f = state.File{Size: size, CRC32C: crc}
		}
		if immutable(e.Name()) {
			seen[e.Name()] = f
		}
		f.Path = rel
		files = append(files, f)
	}
	b.crcs.Lock()
	b.crcs.m = seen
	b.crcs.Unlock()
	return files, nil
}

func (b *backend) cachedCRC(name string, info fs.FileInfo) (state.File, bool) {
	if !immutable(name) {
		return state.File{}, false
	}
	b.crcs.Lock()
	defer b.crcs.Unlock()
	f, ok := b.crcs.m[name]
	return f, ok && f.Size == info.Size()
}

// immutable reports whether pebble never rewrites a file of this name once
// it is complete.
func immutable(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

func (b *backend) Close() error {
	err := b.db.Close()
	if rmErr := os.RemoveAll(b.dir); err == nil && rmErr != nil {
		err = fmt.Errorf("remove state folder: %w", rmErr)
	}
	return err
}

// logger passes pebble's messages to slog: its informational messages at
// debug level.
type logger struct{ l *slog.Logger }

func (l logger) Infof(format string, args ...any) { l.l.Debug(fmt.Sprintf(format, args...)) }
func (l logger) Errorf(format string, args ...any) {
	l.l.Error(fmt.Sprintf(format, args...))
}
func (l logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.l.Error(msg)
	panic("pebblestate: " + msg)
}
