package aggmerge

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ebbflow/ebbflow/state"
	"github.com/google/uuid"
)

// How the table stands on pebble: its options, what pebble reports
// asynchronously (corruption), the durable record of each bucket's synced
// log end, and the free-space reserve.

// pebbleOptions returns the options of the table's DB. Corruption that
// pebble finds (a checksum mismatch in a read or a compaction) is recorded
// in h instead of ending the process (pebble's default), so that reads and
// writes return it as an error naming the file.
func pebbleOptions(opts Options, given bool, h *health) *pebble.Options {
	l := quietLogger{pebble.DefaultLogger}
	return &pebble.Options{
		Cache:                       pebble.NewCache(opts.BlockCacheSize),
		FS:                          opts.FS,
		MemTableSize:                opts.MemTableSize,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       24,
		Logger:                      l,
		ErrorIfNotExists:            !given,
		EventListener: &pebble.EventListener{
			DataCorruption: h.corrupted,
			BackgroundError: func(err error) {
				if !pebble.IsCorruptionError(err) { // corruption is reported once, by DataCorruption
					l.Errorf("background error: %s", err)
				}
			},
		},
	}
}

// quietLogger drops pebble's informational logs.
type quietLogger struct{ pebble.Logger }

func (quietLogger) Infof(string, ...any) {}

// health is what pebble reported about the table's files.
type health struct {
	mu      sync.Mutex
	corrupt error // the first corruption, as ErrCorrupt naming the file
}

func (h *health) corrupted(info pebble.DataCorruptionInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.corrupt == nil {
		h.corrupt = fmt.Errorf("%w: file %s: %s", ErrCorrupt, info.Path, firstLine(info.Details))
	}
}

func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.corrupt
}

func firstLine(err error) string {
	if err == nil {
		return "corrupt"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// pebbleErr classifies an error of pebble: corruption becomes ErrCorrupt,
// naming the file when pebble reported it. Other errors are returned as
// they are.
func (t *Table) pebbleErr(err error) error {
	if err == nil || !pebble.IsCorruptionError(err) {
		return err
	}
	if c := t.health.err(); c != nil {
		return c
	}
	return fmt.Errorf("%w: %s", ErrCorrupt, firstLine(err))
}

// syncedFile, in the table's directory beside pebble's files, records each
// bucket's log end as of the last Sync. It is written (atomically, fsynced)
// after pebble synced its WAL, outside that WAL: when pebble loses the tail
// of its WAL (a truncated or damaged .log, whose tail pebble takes for the
// end of a torn write), the log ends found at Open are below the recorded
// ones, and Open reports the loss instead of serving a table that silently
// forgot synced writes.
const syncedFile = "ebbflow-synced-log-ends"

type syncedEnds struct {
	Table   uuid.UUID `json:"table"`
	LogEnds []uint64  `json:"log_ends"`
}

// readSynced reads the synced log ends of the table in dir (none when the
// file does not exist: a table that never synced, or made before the file).
func readSynced(dir string) (syncedEnds, bool, error) {
	var s syncedEnds
	raw, err := os.ReadFile(filepath.Join(dir, syncedFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, false, nil
	case err != nil:
		return s, false, err
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, false, fmt.Errorf("%w: %s: %v", ErrCorrupt, syncedFile, err)
	}
	return s, true, nil
}

// recordSynced raises the recorded synced log ends to ends (each bucket's
// end only grows), writing the file when one moved. ends must have been
// read before the WAL sync that made them durable.
func (t *Table) recordSynced(ends []uint64) error {
	t.synced.Lock()
	defer t.synced.Unlock()
	moved := false
	for i, e := range ends {
		if e > t.synced.ends[i] {
			t.synced.ends[i], moved = e, true
		}
	}
	if !moved {
		return nil
	}
	raw, err := json.Marshal(syncedEnds{Table: t.id, LogEnds: t.synced.ends})
	if err != nil {
		return err
	}
	_, _, err = state.WriteFileAtomic(filepath.Join(t.dir, syncedFile), func(w io.Writer) error {
		_, err := w.Write(raw)
		return err
	})
	return err
}

// checkSynced compares the log ends found at Open with the recorded synced
// ends. A bucket whose log ends below what a Sync made durable lost writes:
// ErrCorrupt naming the table, the WAL files pebble replayed, and each
// such bucket with both offsets; with Options.AcceptLogLoss the table opens
// and LogLoss returns that error.
func (t *Table) checkSynced(rec syncedEnds, found bool, wals []string) error {
	t.synced.ends = make([]uint64, len(t.mu.buckets))
	if !found || rec.Table != t.id {
		return nil // a table recreated under the same directory has a new id
	}
	var lost []string
	for i, s := range t.mu.buckets {
		if i < len(rec.LogEnds) && s.LogEnd < rec.LogEnds[i] {
			lost = append(lost, fmt.Sprintf("bucket %d log ends at %d, synced up to %d", i, s.LogEnd, rec.LogEnds[i]))
		}
		if i < len(rec.LogEnds) {
			t.synced.ends[i] = max(s.LogEnd, rec.LogEnds[i])
		}
	}
	if len(lost) == 0 {
		return nil
	}
	wal := "none"
	if len(wals) > 0 {
		wal = strings.Join(wals, ", ")
	}
	err := fmt.Errorf("%w: the log lost synced writes (pebble cut its write-ahead log %s short): %s",
		ErrCorrupt, wal, strings.Join(lost, "; "))
	if !t.opts.AcceptLogLoss {
		return err
	}
	t.logLoss = err
	return nil
}

// walFiles lists the write-ahead logs in dir, the files pebble replays at
// Open (it may remove them once replayed).
func walFiles(fs vfs.FS, dir string) []string {
	names, _ := fs.List(dir)
	var wals []string
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			wals = append(wals, filepath.Join(dir, n))
		}
	}
	slices.Sort(wals)
	return wals
}

// LogLoss returns, for a table opened with Options.AcceptLogLoss, the
// ErrCorrupt that Open would otherwise have returned (nil when the log lost
// nothing).
func (t *Table) LogLoss() error { return t.logLoss }

// spaceGuard refuses writes while the free space of the table's file system
// is below Options.MinFreeBytes. Once it found enough, it asks the file
// system again only after spaceEvery (at the rate a table writes, far less
// than the reserve); while short of space, at every write.
type spaceGuard struct {
	mu      sync.Mutex
	okUntil time.Time
}

const spaceEvery = 100 * time.Millisecond

// check returns ErrNoSpace, saying how much is free where, while the free
// space is below the reserve. A file system that cannot tell its free
// space is not guarded.
func (g *spaceGuard) check(opts Options, dir string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if now.Before(g.okUntil) {
		return nil
	}
	if u, err := opts.FS.GetDiskUsage(dir); err == nil && u.AvailBytes < opts.MinFreeBytes {
		return fmt.Errorf("%w: %d bytes free on the file system of %s, the table keeps %d in reserve: free space, then restart (nothing was written)",
			ErrNoSpace, u.AvailBytes, dir, opts.MinFreeBytes)
	}
	g.okUntil = now.Add(spaceEvery)
	return nil
}
