package pebblestate

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/ebbflow/ebbflow/state"
)

// restoreBatchBytes is the size at which a rescale restore commits a batch.
const restoreBatchBytes = 4 << 20

// restore opens the working DB of spec, rebuilt from spec.Restore.
func (f *factory) restore(spec state.KeyedSpec) (*pebble.DB, error) {
	dbDir := filepath.Join(spec.Dir, "db")
	owned := spec.KeyGroups
	if len(spec.Restore) == 1 && covers(spec.Restore[0].Snapshot.KeyGroups, owned) {
		r := spec.Restore[0]
		db, err := f.openCopy(r, dbDir, false)
		if err != nil {
			return nil, err
		}
		if err := deleteOutside(db, owned); err != nil {
			db.Close()
			return nil, fmt.Errorf("restore subtask %d: %w", r.Snapshot.Subtask, err)
		}
		return db, nil
	}
	db, err := f.open(dbDir, false)
	if err != nil {
		return nil, err
	}
	for i, r := range spec.Restore {
		if err := f.copyOwned(db, r, owned, filepath.Join(spec.Dir, fmt.Sprintf("restore-%d", i))); err != nil {
			db.Close()
			return nil, fmt.Errorf("restore subtask %d: %w", r.Snapshot.Subtask, err)
		}
	}
	if len(spec.Restore) > 0 {
		if err := db.Flush(); err != nil {
			db.Close()
			return nil, fmt.Errorf("flush restored state: %w", err)
		}
	}
	return db, nil
}

func covers(outer, inner state.KeyGroupRange) bool {
	return outer.Start <= inner.Start && inner.End <= outer.End
}

// openCopy verifies the files of snapshot r, copies them into dir and opens
// the DB there.
func (f *factory) openCopy(r state.Restored, dir string, readOnly bool) (*pebble.DB, error) {
	if err := state.VerifyFiles(r.CheckpointDir, r.Snapshot.Files); err != nil {
		return nil, fmt.Errorf("restore subtask %d from %q: %w", r.Snapshot.Subtask, r.CheckpointDir, err)
	}
	if err := materialize(r, dir); err != nil {
		return nil, fmt.Errorf("restore subtask %d from %q: %w", r.Snapshot.Subtask, r.CheckpointDir, err)
	}
	po := f.pebbleOptions(readOnly)
	po.ErrorIfNotExists = true
	defer po.Cache.Unref()
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("restore subtask %d from %q: open: %w", r.Snapshot.Subtask, r.CheckpointDir, err)
	}
	return db, nil
}

// materialize places the files of snapshot r in dir: immutable files as hard
// links (copies across devices), the others as copies, since pebble may
// rewrite them in place.
func materialize(r state.Restored, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	manifest := false
	for _, f := range r.Snapshot.Files {
		name := filepath.Base(f.Path)
		manifest = manifest || strings.HasPrefix(name, "MANIFEST-")
		src, dst := filepath.Join(r.CheckpointDir, f.Path), filepath.Join(dir, name)
		if immutable(name) && os.Link(src, dst) == nil {
			continue
		}
		if err := copyFile(src, dst); err != nil {
			return err
		}
	}
	if !manifest {
		return fmt.Errorf("snapshot has no pebble manifest: %w", state.ErrCorrupt)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %q: %w", src, err)
	}
	return out.Close()
}

// deleteOutside deletes every key whose group is not in owned.
func deleteOutside(db *pebble.DB, owned state.KeyGroupRange) error {
	lo, hi := state.GroupBounds(owned)
	if err := db.DeleteRange([]byte{}, lo, pebble.NoSync); err != nil {
		return fmt.Errorf("delete groups below %d: %w", owned.Start, err)
	}
	if hi == nil {
		return nil
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: hi})
	if err != nil {
		return err
	}
	var last []byte
	if it.Last() {
		last = append(append([]byte{}, it.Key()...), 0)
	}
	if err := it.Close(); err != nil {
		return err
	}
	if last != nil {
		if err := db.DeleteRange(hi, last, pebble.NoSync); err != nil {
			return fmt.Errorf("delete groups from %d: %w", owned.End, err)
		}
	}
	return nil
}

// copyOwned copies the owned groups of snapshot r into db, through a
// read-only copy of the snapshot in tmp.
func (f *factory) copyOwned(db *pebble.DB, r state.Restored, owned state.KeyGroupRange, tmp string) error {
	src, err := f.openCopy(r, tmp, true)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	defer src.Close()
	lo, hi := state.GroupBounds(owned)
	batch := db.NewBatch()
	defer func() { batch.Close() }()
	err = scan(src, lo, hi, func(k, v []byte) error {
		if err := batch.Set(k, v, nil); err != nil {
			return err
		}
		if batch.Len() < restoreBatchBytes {
			return nil
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			return err
		}
		batch.Close()
		batch = db.NewBatch()
		return nil
	})
	if err != nil {
		return fmt.Errorf("copy owned groups: %w", err)
	}
	return batch.Commit(pebble.NoSync)
}
