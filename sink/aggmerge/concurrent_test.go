package aggmerge

import (
	"fmt"
	"sync"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// TestConsistentReads runs readers while a writer moves amounts between
// keys of different buckets, batch by batch, keeping the grand total zero.
// Every scan must see a total of zero (one snapshot), and the log must
// replay to the final rows.
func TestConsistentReads(t *testing.T) {
	s := smallSchema()
	s.Buckets = 8
	tbl, err := Open(t.TempDir(), s, Options{CacheRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	const keys, batches = 40, 400
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	reader := func(read func() error) {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := read(); err != nil {
				errs <- err
				return
			}
		}
	}
	wg.Add(3)
	go reader(func() error {
		var total int64
		if err := tbl.Scan(func(r Row) error { total += r.Values[0].Int(); return nil }); err != nil {
			return err
		}
		if total != 0 {
			return fmt.Errorf("scan saw a total of %d", total)
		}
		return nil
	})
	go reader(func() error {
		_, _, err := tbl.Get(key(fmt.Sprint(7)))
		return err
	})
	go reader(func() error {
		return tbl.ReadLog(3, 0, func(*Entry) error { return nil })
	})
	b, _ := tbl.NewBatch(Writer{ID: "mover"}, []string{"n"})
	for i := range batches {
		from, to := key(fmt.Sprint(i%keys)), key(fmt.Sprint((i*7+3)%keys))
		_ = b.Upsert(Aggregate, from, []agg.Value{agg.IntValue(-int64(i))})
		_ = b.Upsert(Aggregate, to, []agg.Value{agg.IntValue(int64(i))})
		mustApply(t, tbl, b)
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rows := map[string]int64{}
	_ = tbl.Scan(func(r Row) error { rows[r.Key[0].Str()] = r.Values[0].Int(); return nil })
	replayed := map[string]int64{}
	for bk := range s.Buckets {
		_ = tbl.ReadLog(bk, 0, func(e *Entry) error {
			if e.Op == Insert || e.Op == UpdateAfter {
				replayed[e.Key[0].Str()] = e.After[0].Int()
			}
			return nil
		})
	}
	if fmt.Sprint(rows) != fmt.Sprint(replayed) {
		t.Errorf("rows %v, replayed %v", rows, replayed)
	}
}
