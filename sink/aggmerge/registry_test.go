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
