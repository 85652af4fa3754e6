package aggmerge

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// crashDirEnv makes the test binary the writer process of TestCrash;
// crashCacheEnv sets its Options.CacheRows.
const (
	crashDirEnv   = "AGGMERGE_CRASH_DIR"
	crashCacheEnv = "AGGMERGE_CRASH_CACHE_ROWS"
)

func crashSchema() Schema {
	return Schema{
		Key: []Column{{Name: "id", Type: agg.Int64}},
		Values: []Column{
			{Name: "total", Type: agg.Int64, Func: "sum"},
			{Name: "peak", Type: agg.Int64, Func: "max"},
			{Name: "n", Type: agg.Int64, Func: "count"},
		},
		Buckets: 4,
		Delete:  DeleteAllow,
	}
}

// crashBatch fills b with batch i of the deterministic crash workload. Its
// epoch is i, so the log tells which batches a table holds.
func crashBatch(tbl *Table, i uint64) (*Batch, error) {
	b, err := tbl.NewBatch(Writer{ID: "crash", Epoch: i}, nil)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(i, 99))
	for range 50 {
		k := []agg.Value{agg.IntValue(int64(r.IntN(500)))}
		v := agg.IntValue(int64(r.IntN(100)))
		switch r.IntN(10) {
		case 0:
			err = b.Delete(Aggregate, k, nil)
		case 1:
			err = b.Upsert(Overwrite, k, []agg.Value{v, v, agg.IntValue(1)})
		default:
			err = b.Upsert(Aggregate, k, []agg.Value{v, v, v})
		}
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// batchesHeld returns the number of batches a crash table holds: one more
// than the highest epoch in its log.
func batchesHeld(tbl *Table) (uint64, error) {
	var n uint64
	for b := range tbl.Schema().Buckets {
		if err := tbl.ReadLog(b, 0, func(e *Entry) error { n = max(n, e.Writer.Epoch+1); return nil }); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// TestMain runs the test binary as the writer process of TestCrash when
// crashDirEnv is set.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		err := crashChild(dir)
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// crashChild resumes after the last batch the table holds and writes
// batches until killed, syncing every tenth and reporting each sync on
// stdout. It returns only on error.
func crashChild(dir string) error {
	cacheRows, _ := strconv.Atoi(os.Getenv(crashCacheEnv))
	tbl, err := Open(dir, crashSchema(), Options{CacheRows: cacheRows})
	if err != nil {
		return err
	}
	first, err := batchesHeld(tbl)
	if err != nil {
		return err
	}
	for i := first; ; i++ {
		b, err := crashBatch(tbl, i)
		if err != nil {
			return err
		}
		if _, err := tbl.Apply(b); err != nil {
			return err
		}
		// A pause between batches makes most kills land between syncs, with
		// rows changed since the last one (else most land in the fsync).
		time.Sleep(500 * time.Microsecond)
		if i%10 == 9 {
			if err := tbl.Sync(); err != nil {
				return err
			}
			fmt.Printf("synced %d\n", i+1)
		}
	}
}

// TestCrash kills a writer process with SIGKILL at random (seeded) moments,
// several times over the same table. After each kill the reopened table's
// rows must equal its log replayed from offset 0, must hold every synced
// batch, and must equal a fresh table given the same whole batches (no
// batch is torn). Odd rounds give the child a row cache of 64 rows: rows
// are then read from pebble, evicted, and stored between syncs.
func TestCrash(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AGGMERGE_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (rerun with AGGMERGE_CRASH_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	var synced uint64
	for round := range 4 {
		delay := time.Duration(20+r.IntN(400)) * time.Millisecond
		cacheRows := 0 // the default
		if round%2 == 1 {
			cacheRows = 64
		}
		synced = max(synced, crashRound(t, dir, delay, cacheRows))
		tbl, err := Open(dir, crashSchema(), Options{})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		held, err := batchesHeld(tbl)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after %v: %d batches held, %d synced", round, delay, held, synced)
		if held < synced {
			t.Fatalf("round %d: %d batches held, but %d were synced", round, held, synced)
		}
		rows := scanAll(t, tbl)
		if replayed := replayAll(t, tbl); !equalRows(rows, replayed) {
			t.Fatalf("round %d: rows (%d) differ from the log replayed (%d)", round, len(rows), len(replayed))
		}
		if want := oracle(t, held); !equalRows(rows, want) {
			t.Fatalf("round %d: rows differ from %d whole batches applied to a fresh table", round, held)
		}
		if err := tbl.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// crashRound runs the child on dir, kills it delay after its first sync and
// returns the highest batch count it reported synced.
func crashRound(t *testing.T, dir string, delay time.Duration, cacheRows int) uint64 {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashCacheEnv+"="+strconv.Itoa(cacheRows))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }() // if the test fails before the kill
	lines := make(chan uint64)
	go func() { // ends when the killed child's stdout closes
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, ok := strings.CutPrefix(sc.Text(), "synced "); ok {
				v, _ := strconv.ParseUint(n, 10, 64)
				lines <- v
			}
		}
	}()
	var synced uint64
	var timer *time.Timer
	for n := range lines {
		synced = n
		if timer == nil {
			timer = time.AfterFunc(delay, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		}
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("child exited by itself")
	}
	return synced
}

func scanAll(t *testing.T, tbl *Table) map[int64][]agg.Value {
	rows := map[int64][]agg.Value{}
	if err := tbl.Scan(func(r Row) error { rows[r.Key[0].Int()] = slices.Clone(r.Values); return nil }); err != nil {
		t.Fatal(err)
	}
	return rows
}

// replayAll rebuilds the rows from every bucket's log from offset 0.
func replayAll(t *testing.T, tbl *Table) map[int64][]agg.Value {
	rows := map[int64][]agg.Value{}
	for b := range tbl.Schema().Buckets {
		err := tbl.ReadLog(b, 0, func(e *Entry) error {
			switch e.Op {
			case Insert, UpdateAfter:
				rows[e.Key[0].Int()] = e.After
			case Delete:
				delete(rows, e.Key[0].Int())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return rows
}

// oracle applies batches [0, n) to a fresh table.
func oracle(t *testing.T, n uint64) map[int64][]agg.Value {
	tbl, err := Open(t.TempDir(), crashSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	for i := range n {
		b, err := crashBatch(tbl, i)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	return scanAll(t, tbl)
}

func equalRows(a, b map[int64][]agg.Value) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !equalVals(v, b[k]) {
			return false
		}
	}
	return true
}
