package aggmerge

import (
	"errors"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

func TestRegistry(t *testing.T) {
	dir := t.TempDir()
	s := smallSchema()
	s.Values = append(s.Values, Column{Name: "peak", Type: agg.Int64, Func: "max"})
	tbl, err := Open(dir, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e1, err := tbl.Register("job-a", "a/sink/0", []string{"n"})
	if err != nil || e1 != 1 {
		t.Fatalf("first registration: epoch %d, %v", e1, err)
	}
	// Another job on a disjoint column is fine; on an overlapping one it is not.
	if _, err := tbl.Register("job-b", "b/sink/0", []string{"peak"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Register("job-c", "c/sink/0", []string{"peak", "note"}); !errors.Is(err, ErrColumnConflict) {
		t.Errorf("overlap with job-b: %v", err)
	}
	if _, err := tbl.Register("job-c", "c/sink/0", nil); !errors.Is(err, ErrColumnConflict) {
		t.Errorf("all columns overlap: %v", err)
	}
	if _, err := tbl.Register("job-c", "a/sink/0", []string{"note"}); !errors.Is(err, ErrColumnConflict) {
		t.Errorf("writer id of another job: %v", err)
	}
	// The same job's writers may share columns (they own different buckets).
	if _, err := tbl.Register("job-a", "a/sink/1", []string{"n"}); err != nil {
		t.Fatal(err)
	}
	e2, err := tbl.Register("job-a", "a/sink/0", []string{"n"})
	if err != nil || e2 != 2 {
		t.Fatalf("re-registration: epoch %d, %v", e2, err)
	}

	write := func(epoch uint64, cols []string) error {
		b, err := tbl.NewBatch(Writer{ID: "a/sink/0", Epoch: epoch}, cols)
		if err != nil {
			return err
		}
		vals := make([]agg.Value, len(cols))
		for i := range vals {
			vals[i] = agg.IntValue(1)
		}
		_ = b.Upsert(Aggregate, key("k"), vals)
		_, err = tbl.Apply(b)
		return err
	}
	if err := write(1, []string{"n"}); !errors.Is(err, ErrFenced) {
		t.Errorf("zombie of epoch 1: %v", err)
	}
	if err := write(2, []string{"n", "peak"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unregistered column: %v", err)
	}
	if err := write(2, []string{"n"}); err != nil {
		t.Errorf("current epoch: %v", err)
	}

	// Registrations survive a reopen; Unregister removes them.
	_ = tbl.Close()
	if tbl, err = Open(dir, s, Options{}); err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	if got := tbl.Writers(); len(got) != 3 || got[0].Writer != "a/sink/0" || got[0].Epoch != 2 {
		t.Fatalf("writers after reopen: %+v", got)
	}
	if err := write(1, []string{"n"}); !errors.Is(err, ErrFenced) {
		t.Errorf("zombie after reopen: %v", err)
	}
	if err := tbl.Unregister("b/sink/0"); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Register("job-c", "c/sink/0", []string{"peak"}); err != nil {
		t.Errorf("column freed by Unregister: %v", err)
	}
}

// TestRegistryRecordsWrites: a registration says whether its writer has
// changed a row (stored with that write, so it survives a reopen and is
// kept by a re-registration) and the last checkpoint it committed;
// ForgetWrites clears both, keeping the epoch.
func TestRegistryRecordsWrites(t *testing.T) {
	dir := t.TempDir()
	tbl, err := Open(dir, smallSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { tbl.Close() }()
	epoch, err := tbl.Register("job-a", "a/sink#0", []string{"n"})
	if err != nil {
		t.Fatal(err)
	}
	w := Writer{ID: "a/sink#0", Epoch: epoch}
	reg := func() Registration {
		t.Helper()
		for _, r := range tbl.Writers() {
			if r.Writer == w.ID {
				return r
			}
		}
		t.Fatalf("writer %s not registered", w.ID)
		return Registration{}
	}
	b, err := tbl.NewBatch(w, []string{"n"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Mark(0, Marker{Kind: MarkerCommit, Checkpoint: 1}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, tbl, b)
	if r := reg(); r.Wrote {
		t.Fatalf("a marker counted as a write: %+v", r)
	}
	_ = b.Upsert(Aggregate, key("k"), []agg.Value{agg.IntValue(0)})
	_ = b.Upsert(Aggregate, key("k"), []agg.Value{agg.IntValue(0)})
	mustApply(t, tbl, b) // inserts k with n = 0
	if r := reg(); !r.Wrote || r.Committed {
		t.Fatalf("after a write: %+v, want wrote and no checkpoint", r)
	}
	if err := tbl.RecordCheckpoint(w, 7, 1700); err != nil {
		t.Fatal(err)
	}
	if err := tbl.RecordCheckpoint(Writer{ID: w.ID, Epoch: epoch - 1}, 9, 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("checkpoint of an older epoch: %v, want ErrFenced", err)
	}
	_ = tbl.Close()
	if tbl, err = Open(dir, smallSchema(), Options{}); err != nil {
		t.Fatal(err)
	}
	if r := reg(); !r.Wrote || !r.Committed || r.Checkpoint != 7 || r.EventTimeMs != 1700 {
		t.Fatalf("after a reopen: %+v, want wrote, checkpoint 7 at event time 1700", r)
	}
	if w.Epoch, err = tbl.Register("job-a", w.ID, []string{"n"}); err != nil {
		t.Fatal(err)
	}
	if r := reg(); !r.Wrote || r.Checkpoint != 7 || r.Epoch != epoch+1 {
		t.Fatalf("after a re-registration: %+v, want wrote, checkpoint 7, epoch %d", r, epoch+1)
	}
	if err := tbl.ForgetWrites(w.ID); err != nil {
		t.Fatal(err)
	}
	if r := reg(); r.Wrote || r.Committed || r.Epoch != w.Epoch {
		t.Fatalf("after ForgetWrites: %+v, want no write, no checkpoint, epoch %d", r, w.Epoch)
	}
	if err := tbl.ForgetWrites("nobody#0"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ForgetWrites of an unregistered writer: %v", err)
	}
}
