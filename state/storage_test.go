package state

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/barrier"
)

// writeCheckpoint writes a completed checkpoint with one subtask file.
func writeCheckpoint(t *testing.T, s *Storage, id barrier.CheckpointID) Metadata {
	t.Helper()
	dir, err := s.SubtaskDir(id, "op", 0)
	if err != nil {
		t.Fatal(err)
	}
	size, crc, err := WriteFileAtomic(filepath.Join(dir, "data"), func(w io.Writer) error {
		_, err := io.WriteString(w, strings.Repeat("state ", 100))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	md := Metadata{Job: "j", ID: id, Time: time.Unix(int64(id), 0).UTC(), MaxParallelism: 8,
		Operators: map[string]OperatorSnapshot{"op": {Parallelism: 1, Subtasks: []SubtaskSnapshot{{
			KeyGroups: KeyGroupRange{0, 8},
			Files:     CheckpointFiles("op", 0, []File{{Path: "data", Size: size, CRC32C: crc}}),
			Unions:    map[string][][]byte{"offsets": {[]byte("p0=7")}},
		}}}}}
	if _, err := s.Complete(md); err != nil {
		t.Fatal(err)
	}
	return md
}

func openStorage(t *testing.T) *Storage {
	t.Helper()
	s, err := OpenStorage(filepath.Join(t.TempDir(), "checkpoints", "job"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStorageRoundTrip(t *testing.T) {
	s := openStorage(t)
	md := writeCheckpoint(t, s, 7)
	md.Version = MetadataVersion
	got, err := s.Load(7)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, md) {
		t.Errorf("loaded %+v, want %+v", got, md)
	}
	ents, _ := os.ReadDir(s.Path(7))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	if _, err := s.SubtaskDir(8, "../x", 0); err == nil {
		t.Error("SubtaskDir accepted uid ../x")
	}
}

// TestWriteFileAtomicFailure checks that a failed write leaves the old file
// and no temporary file.
func TestWriteFileAtomicFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if _, _, err := WriteFileAtomic(path, func(w io.Writer) error { _, err := io.WriteString(w, "old"); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, _, err := WriteFileAtomic(path, func(w io.Writer) error {
		io.WriteString(w, "new, half written")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "old" {
		t.Errorf("file = %q after failed write, want old", data)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("folder holds %d entries after failed write, want 1", len(ents))
	}
}

// TestLatestSkipsDamaged damages the newest checkpoint in each way and checks
// that Latest reports it by name and falls back to the previous one.
func TestLatestSkipsDamaged(t *testing.T) {
	damage := map[string]func(t *testing.T, s *Storage){
		"corrupt metadata": func(t *testing.T, s *Storage) {
			p := filepath.Join(s.Path(3), MetadataFile)
			data, _ := os.ReadFile(p)
			data[len(data)/2]++
			os.WriteFile(p, data, 0o644)
		},
		"truncated metadata": func(t *testing.T, s *Storage) {
			p := filepath.Join(s.Path(3), MetadataFile)
			data, _ := os.ReadFile(p)
			os.WriteFile(p, data[:len(data)-10], 0o644)
		},
		"truncated state file": func(t *testing.T, s *Storage) {
			os.Truncate(filepath.Join(s.Path(3), "op", "0", "data"), 10)
		},
		"changed state file": func(t *testing.T, s *Storage) {
			p := filepath.Join(s.Path(3), "op", "0", "data")
			data, _ := os.ReadFile(p)
			data[0] = 'S'
			os.WriteFile(p, data, 0o644)
		},
		"missing state file": func(t *testing.T, s *Storage) {
			os.Remove(filepath.Join(s.Path(3), "op", "0", "data"))
		},
		"missing metadata": func(t *testing.T, s *Storage) {
			os.Remove(filepath.Join(s.Path(3), MetadataFile))
		},
	}
	for name, fn := range damage {
		t.Run(name, func(t *testing.T) {
			s := openStorage(t)
			writeCheckpoint(t, s, 1)
			writeCheckpoint(t, s, 2)
			writeCheckpoint(t, s, 3)
			fn(t, s)
			md, skipped, err := s.Latest()
			if err != nil || md.ID != 2 {
				t.Fatalf("Latest = %d, %v; want checkpoint 2", md.ID, err)
			}
			if len(skipped) != 1 || !strings.Contains(skipped[0].Error(), "chk-0000000003") {
				t.Fatalf("skipped = %v, want one error naming chk-0000000003", skipped)
			}
			if !errors.Is(skipped[0], ErrCorrupt) && !errors.Is(skipped[0], ErrIncomplete) {
				t.Errorf("skipped error %v is neither ErrCorrupt nor ErrIncomplete", skipped[0])
			}
		})
	}
}

func TestLatestNone(t *testing.T) {
	s := openStorage(t)
	if _, skipped, err := s.Latest(); !errors.Is(err, ErrNoCheckpoint) || len(skipped) != 0 {
		t.Errorf("Latest of empty storage = %v, %v", skipped, err)
	}
	if _, err := s.Dir(4); err != nil {
		t.Fatal(err)
	}
	if _, skipped, err := s.Latest(); !errors.Is(err, ErrNoCheckpoint) || len(skipped) != 1 || !errors.Is(skipped[0], ErrIncomplete) {
		t.Errorf("Latest with an incomplete folder = %v, %v", skipped, err)
	}
}

func TestRetainAndAbort(t *testing.T) {
	s := openStorage(t)
	for id := barrier.CheckpointID(1); id <= 5; id++ {
		writeCheckpoint(t, s, id)
	}
	if _, err := s.Dir(0); err != nil { // an incomplete leftover, older
		t.Fatal(err)
	}
	if _, err := s.Dir(4000000000); err != nil { // in progress, newer
		t.Fatal(err)
	}
	// Checkpoint 5 is corrupt: it does not count among the retained.
	os.WriteFile(filepath.Join(s.Path(5), MetadataFile), []byte("{}"), 0o644)
	if err := s.Retain(2); err != nil {
		t.Fatal(err)
	}
	var got []barrier.CheckpointID
	cps, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range cps {
		got = append(got, cp.ID)
	}
	if want := []barrier.CheckpointID{3, 4, 5, 4000000000}; !reflect.DeepEqual(got, want) {
		t.Errorf("after Retain(2): %v, want %v", got, want)
	}
	if err := s.Abort(4000000000); err != nil {
		t.Fatal(err)
	}
	if cps, _ := s.List(); len(cps) != 3 || !cps[0].Completed {
		t.Errorf("after Abort: %+v", cps)
	}
	if err := s.Retain(0); err == nil {
		t.Error("Retain(0) accepted")
	}
}

func TestAbandonNewer(t *testing.T) {
	s, err := OpenStorage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for id := barrier.CheckpointID(1); id <= 4; id++ {
		writeCheckpoint(t, s, id)
	}
	moved, err := s.Abandon(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != 2 || moved[0] != CheckpointName(3) || moved[1] != CheckpointName(4) {
		t.Fatalf("moved %v, want checkpoints 3 and 4", moved)
	}
	md, _, err := s.Latest()
	if err != nil || md.ID != 2 {
		t.Fatalf("latest after abandoning = %d, %v; want 2", md.ID, err)
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, AbandonedDir))
	if err != nil || len(ents) != 2 {
		t.Fatalf("abandoned folder holds %d entries (%v), want 2", len(ents), err)
	}
	if moved, err := s.Abandon(2); err != nil || len(moved) != 0 {
		t.Fatalf("second abandon moved %v, %v", moved, err)
	}
}

// TestMkdirSyncRefusesAFileInTheWay: a file (or a link to one) where a
// folder should be is an error, not a folder that later writes fail in.
func TestMkdirSyncRefusesAFileInTheWay(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, link} {
		if err := MkdirSync(p); err == nil || !strings.Contains(err.Error(), "not a folder") {
			t.Errorf("MkdirSync(%s) over a file: %v, want an error", p, err)
		}
	}
	dir := filepath.Join(root, "a", "b")
	for range 2 { // made, then found
		if err := MkdirSync(dir); err != nil {
			t.Fatal(err)
		}
	}
}
