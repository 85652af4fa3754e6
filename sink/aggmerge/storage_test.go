package aggmerge

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ebbflow/ebbflow/internal/damage"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// writeSynced writes n rows in n batches into a new table in dir, syncs and
// closes it, and returns the log ends.
func writeSynced(t *testing.T, dir string, n int, flush bool) []uint64 {
	t.Helper()
	tbl, err := Open(dir, smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tbl.NewBatch(Writer{ID: "w"}, nil)
	for i := range n {
		_ = b.Upsert(Aggregate, key(fmt.Sprint("k", i)), []agg.Value{agg.IntValue(int64(i)), agg.StringValue("x")})
		mustApply(t, tbl, b)
	}
	if err := tbl.Sync(); err != nil {
		t.Fatal(err)
	}
	if flush {
		if err := tbl.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	ends := tbl.LogEnds()
	if err := tbl.Close(); err != nil {
		t.Fatal(err)
	}
	return ends
}

func TestLostWALTail(t *testing.T) {
	for _, how := range []string{"truncate", "flip"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			synced := writeSynced(t, dir, 50, false)
			wal := damage.Newest(t, dir, ".log")
			damage.Rewrite(t, wal, func(raw []byte) []byte {
				if how == "truncate" {
					return raw[:len(raw)/2]
				}
				raw[len(raw)*3/4] ^= 0x5a
				return raw
			})
			_, err := Open(dir, Schema{}, Options{})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open of a table that lost synced writes: %v, want ErrCorrupt", err)
			}
			msg := err.Error()
			for _, want := range []string{dir, filepath.Base(wal), "lost synced writes", "bucket 1 log ends at ", fmt.Sprintf("synced up to %d", synced[1])} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
			// Reopening reports it again: the loss is not forgotten.
			if _, err := Open(dir, Schema{}, Options{}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("second open: %v, want ErrCorrupt", err)
			}
			tbl, err := Open(dir, Schema{}, Options{AcceptLogLoss: true})
			if err != nil {
				t.Fatal(err)
			}
			defer tbl.Close()
			if !errors.Is(tbl.LogLoss(), ErrCorrupt) || tbl.LogEnds()[1] >= synced[1] {
				t.Fatalf("accepted loss %v, log ends %v (synced %v)", tbl.LogLoss(), tbl.LogEnds(), synced)
			}
		})
	}
}

// TestSyncedEndsNoFalseAlarm: a table closed and reopened, or recreated in
// the same directory, is not reported as damaged (TestCrash kills tables
// with unsynced writes past their last Sync).
func TestSyncedEndsNoFalseAlarm(t *testing.T) {
	dir := t.TempDir()
	writeSynced(t, dir, 20, false)
	tbl, err := Open(dir, Schema{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.LogLoss() != nil {
		t.Fatal(tbl.LogLoss())
	}
	_ = tbl.Close()
	// A table recreated under the same directory has a new identity: the
	// old record does not apply to it.
	rec, found, err := readSynced(dir)
	if err != nil || !found || rec.LogEnds[0] == 0 {
		t.Fatalf("synced record %+v %v %v", rec, found, err)
	}
	for _, e := range []string{"MANIFEST", "OPTIONS", "CURRENT", "marker", ".log", ".sst", "LOCK"} {
		ents, _ := os.ReadDir(dir)
		for _, f := range ents {
			if strings.Contains(f.Name(), e) {
				_ = os.Remove(filepath.Join(dir, f.Name()))
			}
		}
	}
	tbl, err = Open(dir, smallSchema(), Options{})
	if err != nil {
		t.Fatalf("recreated table: %v", err)
	}
	_ = tbl.Close()
}

// TestCorruptSST flips bytes in a table's sstable: pebble's default is to
// end the process (its fatal logger); the table returns ErrCorrupt naming
// the file instead, from Open.
func TestCorruptSST(t *testing.T) {
	dir := t.TempDir()
	writeSynced(t, dir, 500, true)
	sst := damage.Newest(t, dir, ".sst")
	damage.Scribble(t, sst)
	_, err := Open(dir, Schema{}, Options{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), sst) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("open of a table with a corrupt sstable: %v, want one line of ErrCorrupt naming %s", err, sst)
	}
}

// lowSpaceFS is the real file system, but tells the free space it is set to.
type lowSpaceFS struct {
	vfs.FS
	avail atomic.Uint64
}

func (fs *lowSpaceFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	u, err := fs.FS.GetDiskUsage(path)
	u.AvailBytes = fs.avail.Load()
	return u, err
}

// TestNoSpace fills the table's file system below its reserve while a
// writer writes: Apply refuses with ErrNoSpace naming the directory and
// writes nothing; once space is freed the writes go on, and the table
// reopened equals the writes that were accepted.
func TestNoSpace(t *testing.T) {
	dir := t.TempDir()
	fs := &lowSpaceFS{FS: vfs.Default}
	fs.avail.Store(1 << 40)
	opts := Options{FS: fs, MinFreeBytes: 1 << 30}
	tbl, err := Open(dir, smallSchema(), opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	b, _ := tbl.NewBatch(Writer{ID: "w"}, nil)
	write := func(i int) error {
		k := fmt.Sprint("k", i%7)
		_ = b.Upsert(Aggregate, key(k), []agg.Value{agg.IntValue(int64(i)), agg.NullValue()})
		_, err := tbl.Apply(b)
		b.Reset()
		if err == nil {
			want[k] += int64(i)
		}
		return err
	}
	for i := range 20 {
		if err := write(i); err != nil {
			t.Fatal(err)
		}
	}
	fs.avail.Store(100 << 20)
	tbl.space.okUntil = time.Time{} // the guard would look again within spaceEvery
	ends := tbl.LogEnds()
	err = write(20)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "104857600 bytes free") {
		t.Fatalf("write below the reserve: %v, want ErrNoSpace naming %s and the free space", err, dir)
	}
	if !slices.Equal(tbl.LogEnds(), ends) {
		t.Fatalf("a refused write appended: log ends %v, were %v", tbl.LogEnds(), ends)
	}
	if err := tbl.Sync(); err != nil { // what was written is made durable
		t.Fatal(err)
	}
	fs.avail.Store(1 << 40)
	for i := 21; i < 40; i++ {
		if err := write(i); err != nil {
			t.Fatalf("write after space was freed: %v", err)
		}
	}
	if err := tbl.Close(); err != nil {
		t.Fatal(err)
	}
	tbl, err = Open(dir, Schema{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	got := map[string]int64{}
	if err := tbl.Scan(func(r Row) error {
		got[r.Key[0].Str()] = r.Values[0].Int()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("table %v, want %v", got, want)
	}
}
