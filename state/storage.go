package state

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
)

// MetadataVersion is the Metadata.Version this package writes and reads.
const MetadataVersion = 1

// ErrNoCheckpoint is returned by Latest when no checkpoint verifies.
var ErrNoCheckpoint = errors.New("state: no usable checkpoint")

// ErrIncomplete marks a checkpoint folder without metadata: in progress,
// aborted, or cut short by a crash.
var ErrIncomplete = errors.New("state: checkpoint incomplete")

const checkpointPrefix = "chk-"

// Storage keeps the checkpoints of one job in a folder, one subfolder per
// checkpoint (chk-0000000007) holding a subfolder per operator subtask
// (<uid>/<subtask>) and, once complete, the metadata file. A checkpoint
// exists only once its metadata is written (atomically, last); anything else
// is a leftover that Retain removes.
type Storage struct {
	dir string
}

// OpenStorage opens (creating it if needed) the checkpoint folder of a job.
func OpenStorage(dir string) (*Storage, error) {
	if err := MkdirSync(dir); err != nil {
		return nil, fmt.Errorf("open checkpoint storage: %w", err)
	}
	return &Storage{dir: dir}, nil
}

// CheckpointName is the folder name of checkpoint id; names sort by id.
func CheckpointName(id barrier.CheckpointID) string {
	return fmt.Sprintf("%s%010d", checkpointPrefix, uint64(id))
}

// Path returns the folder of checkpoint id without creating it.
func (s *Storage) Path(id barrier.CheckpointID) string {
	return filepath.Join(s.dir, CheckpointName(id))
}

// Dir creates (if needed) and returns the folder of checkpoint id.
func (s *Storage) Dir(id barrier.CheckpointID) (string, error) {
	dir := s.Path(id)
	if err := MkdirSync(dir); err != nil {
		return "", fmt.Errorf("create checkpoint %s: %w", CheckpointName(id), err)
	}
	return dir, nil
}

// SubtaskPath is the folder of an operator subtask inside a checkpoint,
// relative to it: the prefix to give the paths a backend's persist returns
// before recording them in SubtaskSnapshot.Files.
func SubtaskPath(uid string, subtask int) string {
	return filepath.Join(uid, strconv.Itoa(subtask))
}

// CheckpointFiles turns the files a backend's persist returned for subtask
// of operator uid (relative to its subtask folder) into the paths relative to
// the checkpoint folder that SubtaskSnapshot.Files records.
func CheckpointFiles(uid string, subtask int, files []File) []File {
	out := make([]File, len(files))
	for i, f := range files {
		f.Path = filepath.Join(SubtaskPath(uid, subtask), f.Path)
		out[i] = f
	}
	return out
}

// SubtaskDir creates (if needed) and returns the folder that subtask of the
// operator uid writes checkpoint id into. uid must be a plain name.
func (s *Storage) SubtaskDir(id barrier.CheckpointID, uid string, subtask int) (string, error) {
	if uid == "" || !filepath.IsLocal(uid) || strings.ContainsAny(uid, `/\`) || uid == MetadataFile {
		return "", fmt.Errorf("operator uid %q is not a plain folder name", uid)
	}
	dir := filepath.Join(s.Path(id), SubtaskPath(uid, subtask))
	if err := MkdirSync(dir); err != nil {
		return "", fmt.Errorf("create checkpoint %s: %w", CheckpointName(id), err)
	}
	return dir, nil
}

// Complete makes checkpoint md.ID complete by writing its metadata
// atomically: JSON in an envelope carrying the CRC-32C of the metadata bytes.
// It returns the size of the metadata file, which holds the operator state
// inline.
func (s *Storage) Complete(md Metadata) (int64, error) {
	if md.Version == 0 {
		md.Version = MetadataVersion
	}
	raw, err := json.Marshal(md)
	if err != nil {
		return 0, fmt.Errorf("encode metadata of %s: %w", CheckpointName(md.ID), err)
	}
	dir, err := s.Dir(md.ID)
	if err != nil {
		return 0, err
	}
	size, _, err := WriteFileAtomic(filepath.Join(dir, MetadataFile), func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "{\"crc32c\":%d,\"metadata\":%s}\n", crc32.Checksum(raw, castagnoli), raw)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("complete checkpoint %s: %w", CheckpointName(md.ID), err)
	}
	return size, nil
}

// Abort removes the folder of a checkpoint that failed.
func (s *Storage) Abort(id barrier.CheckpointID) error {
	if err := os.RemoveAll(s.Path(id)); err != nil {
		return fmt.Errorf("abort checkpoint %s: %w", CheckpointName(id), err)
	}
	return SyncDir(s.dir)
}

// AbandonedDir is the folder, inside the storage folder, that Abandon moves
// checkpoints to.
const AbandonedDir = "abandoned"

// Abandon moves every checkpoint folder newer than id out of the way, into
// AbandonedDir: after a restore of an older checkpoint they belong to a
// timeline that no longer exists, and a later restore of the latest
// checkpoint must not pick one of them. It returns the names moved.
func (s *Storage) Abandon(id barrier.CheckpointID) ([]string, error) {
	cps, err := s.List()
	if err != nil {
		return nil, err
	}
	var moved []string
	dst := filepath.Join(s.dir, AbandonedDir)
	for _, cp := range cps {
		if cp.ID <= id {
			continue
		}
		if len(moved) == 0 {
			if err := MkdirSync(dst); err != nil {
				return nil, err
			}
		}
		name := fmt.Sprintf("%s-%d", cp.Name, time.Now().UnixNano())
		if err := os.Rename(cp.Dir, filepath.Join(dst, name)); err != nil {
			return moved, fmt.Errorf("abandon checkpoint %s: %w", cp.Name, err)
		}
		moved = append(moved, cp.Name)
	}
	if len(moved) > 0 {
		if err := SyncDir(dst); err != nil {
			return moved, err
		}
		return moved, SyncDir(s.dir)
	}
	return nil, nil
}

// Restore returns what subtask i of parallelism p of operator uid restores
// from checkpoint md (see Redistribute); an operator absent from md gets
// nothing.
func (s *Storage) Restore(md Metadata, uid string, p, i int) (OperatorState, []Restored) {
	op := md.Operators[uid]
	st, snaps := Redistribute(op, md.MaxParallelism, p, i)
	restored := make([]Restored, len(snaps))
	for j, snap := range snaps {
		restored[j] = Restored{CheckpointDir: s.Path(md.ID), Snapshot: snap}
	}
	return st, restored
}

// Checkpoint is one checkpoint folder as List sees it.
type Checkpoint struct {
	ID   barrier.CheckpointID
	Name string
	Dir  string
	// Completed reports that the metadata file exists (it is verified only by
	// Load).
	Completed bool
}

// List returns every checkpoint folder, completed or not, by ascending id.
func (s *Storage) List() ([]Checkpoint, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var cps []Checkpoint
	for _, e := range ents {
		digits, ok := strings.CutPrefix(e.Name(), checkpointPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		id, err := strconv.ParseUint(digits, 10, 64)
		if err != nil {
			continue
		}
		cp := Checkpoint{ID: barrier.CheckpointID(id), Name: e.Name(), Dir: filepath.Join(s.dir, e.Name())}
		if _, err := os.Stat(filepath.Join(cp.Dir, MetadataFile)); err == nil {
			cp.Completed = true
		}
		cps = append(cps, cp)
	}
	slices.SortFunc(cps, func(a, b Checkpoint) int { return cmp.Compare(a.ID, b.ID) })
	return cps, nil
}

// Load reads the metadata of checkpoint id and verifies it: the metadata
// checksum, and the size and checksum of every file it lists. Errors wrap
// ErrIncomplete (no metadata) or ErrCorrupt.
func (s *Storage) Load(id barrier.CheckpointID) (Metadata, error) {
	md, err := s.readMetadata(id)
	if err != nil {
		return Metadata{}, err
	}
	dir := s.Path(id)
	for uid, op := range md.Operators {
		for _, st := range op.Subtasks {
			if err := VerifyFiles(dir, st.Files); err != nil {
				return Metadata{}, fmt.Errorf("load checkpoint %s: operator %q subtask %d: %w", CheckpointName(id), uid, st.Subtask, err)
			}
		}
	}
	return md, nil
}

// readMetadata reads and checks the metadata file only.
func (s *Storage) readMetadata(id barrier.CheckpointID) (Metadata, error) {
	name := CheckpointName(id)
	data, err := os.ReadFile(filepath.Join(s.Path(id), MetadataFile))
	if errors.Is(err, os.ErrNotExist) {
		return Metadata{}, fmt.Errorf("load checkpoint %s: no %s: %w", name, MetadataFile, ErrIncomplete)
	}
	if err != nil {
		return Metadata{}, fmt.Errorf("load checkpoint %s: %w", name, err)
	}
	var env struct {
		CRC32C   *uint32         `json:"crc32c"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(data, &env); err != nil || env.CRC32C == nil || env.Metadata == nil {
		return Metadata{}, fmt.Errorf("load checkpoint %s: unreadable %s: %w", name, MetadataFile, ErrCorrupt)
	}
	if crc := crc32.Checksum(env.Metadata, castagnoli); crc != *env.CRC32C {
		return Metadata{}, fmt.Errorf("load checkpoint %s: %s crc32c %08x, want %08x: %w", name, MetadataFile, crc, *env.CRC32C, ErrCorrupt)
	}
	var md Metadata
	dec := json.NewDecoder(bytes.NewReader(env.Metadata))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&md); err != nil {
		return Metadata{}, fmt.Errorf("load checkpoint %s: decode %s: %w: %v", name, MetadataFile, ErrCorrupt, err)
	}
	if md.Version != MetadataVersion {
		return Metadata{}, fmt.Errorf("load checkpoint %s: metadata version %d, want %d", name, md.Version, MetadataVersion)
	}
	if md.ID != id {
		return Metadata{}, fmt.Errorf("load checkpoint %s: metadata names checkpoint %d: %w", name, md.ID, ErrCorrupt)
	}
	return md, nil
}

// Latest returns the newest checkpoint that Load verifies. Each newer folder
// it skipped (incomplete or corrupt) is reported in skipped, one error per
// checkpoint that names it; when none verifies it returns ErrNoCheckpoint.
func (s *Storage) Latest() (md Metadata, skipped []error, err error) {
	cps, err := s.List()
	if err != nil {
		return Metadata{}, nil, err
	}
	for i := len(cps) - 1; i >= 0; i-- {
		md, err := s.Load(cps[i].ID)
		if err == nil {
			return md, skipped, nil
		}
		skipped = append(skipped, err)
	}
	return Metadata{}, skipped, ErrNoCheckpoint
}

// Retain keeps the k newest completed checkpoints (those whose metadata
// reads back) and removes every other checkpoint folder older than the
// newest of them: older checkpoints, and incomplete or corrupt leftovers.
// Folders newer than the newest completed one (in progress) are kept.
func (s *Storage) Retain(k int) error {
	if k < 1 {
		return fmt.Errorf("retain %d checkpoints: need at least 1", k)
	}
	cps, err := s.List()
	if err != nil {
		return err
	}
	keep := map[barrier.CheckpointID]bool{}
	var newest barrier.CheckpointID
	for i := len(cps) - 1; i >= 0 && len(keep) < k; i-- {
		if !cps[i].Completed {
			continue
		}
		if _, err := s.readMetadata(cps[i].ID); err != nil {
			continue
		}
		if len(keep) == 0 {
			newest = cps[i].ID
		}
		keep[cps[i].ID] = true
	}
	if len(keep) == 0 {
		return nil
	}
	removed := false
	for _, cp := range cps {
		if cp.ID >= newest || keep[cp.ID] {
			continue
		}
		if err := os.RemoveAll(cp.Dir); err != nil {
			return fmt.Errorf("remove checkpoint %s: %w", cp.Name, err)
		}
		removed = true
	}
	if removed {
		return SyncDir(s.dir)
	}
	return nil
}
