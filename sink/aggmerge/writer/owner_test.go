package writer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// TestSinkRefusesABucketItDoesNotOwn: a record of a bucket another subtask
// owns is an error naming the bucket, the subtask and the owner, and nothing
// of it is written; a record of an owned bucket is written.
func TestSinkRefusesABucketItDoesNotOwn(t *testing.T) {
	tbl := openSumTable(t, t.TempDir())
	s, err := openSink(tbl, 0, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.timer = true // the hand-built context has no timers; Snapshot flushes
	rec := func(k int64) record {
		key, err := tbl.AppendKey(nil, []agg.Value{agg.IntValue(k)})
		if err != nil {
			t.Fatal(err)
		}
		return record{bucket: int32(aggmerge.BucketOf(key, testBuckets)), key: key, vals: []agg.Value{agg.IntValue(1)}}
	}
	var mine, foreign record
	for k := int64(0); mine.key == nil || foreign.key == nil; k++ {
		if r := rec(k); Owner(int(r.bucket), 2) == 0 {
			mine = r
		} else {
			foreign = r
		}
	}
	err = s.Write([]record{foreign})
	want := fmt.Sprintf("a record of bucket %d reached subtask 0, the bucket's owner is subtask 1 of 2", foreign.bucket)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Write of a foreign bucket's record: %v, want an error saying %q", err, want)
	}
	s.cfg.NoCombine, s.comb = true, nil // write through, so the batch shows what Write accepted
	if err := s.Write([]record{mine}); err != nil {
		t.Fatalf("Write of an owned bucket's record: %v", err)
	}
	if _, err := s.Snapshot(1); err != nil {
		t.Fatal(err)
	}
	ends := tbl.LogEnds()
	if ends[foreign.bucket] != 0 || ends[mine.bucket] != 1 {
		t.Errorf("log ends %v: want bucket %d (foreign) empty, bucket %d (owned) one entry", ends, foreign.bucket, mine.bucket)
	}
}
