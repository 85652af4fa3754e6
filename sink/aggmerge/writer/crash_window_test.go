package writer_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// The crash harness's window mode: the events carry an event time, one
// millisecond per sequence number (each partition's in order, so none is
// late); the table sums and counts per key and hopping window (1s every
// 500ms), retained 2s after a window's end, so most windows are deleted
// while the harness kills the job.
const modeWindow = "window"

var crashBase = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC).UnixNano()

func crashTime(seq uint64) int64 { return crashBase + int64(seq)*int64(time.Millisecond) }

var crashEventTime = []kafka.Option[operators.Event]{
	kafka.Timestamp(func(_ *kgo.Record, e operators.Event) (int64, error) { return e.Time, nil }),
}

func crashWindow() *writer.Window {
	retain := 2 * time.Second
	return &writer.Window{Size: time.Second, Slide: 500 * time.Millisecond, Retain: &retain}
}

func mapCrashWindowed(e operators.Event, r *writer.Row) error {
	r.Kind = runtime.RowInsert
	r.Key = append(r.Key[:0], agg.IntValue(int64(e.Seq%keys)))
	r.At = e.Time
	r.Vals = append(r.Vals[:0], agg.IntValue(e.Value), agg.IntValue(1))
	return nil
}

// crashWindowsLeft is the table once the job read events [0, count): every
// partition's watermark is its last event time less 1ns, the job's the
// least of them (the partition of count-8), and the windows whose end plus
// 2s is past it are gone.
func crashWindowsLeft(count uint64) map[wkey]wval {
	all := map[wkey]wval{}
	size, slide := int64(time.Second), int64(500*time.Millisecond)
	for seq := range count {
		at := crashTime(seq)
		for s := at - at%slide - size; s <= at; s += slide {
			if at < s || at >= s+size {
				continue
			}
			k := wkey{int64(seq % keys), s / 1000, (s + size) / 1000}
			v := all[k]
			all[k] = wval{v.total + operators.ValueOf(seq), v.n + 1}
		}
	}
	wm := crashTime(count-crashParts) - 1
	left := map[wkey]wval{}
	for k, v := range all {
		if k.end*1000+int64(2*time.Second) > wm {
			left[k] = v
		}
	}
	return left
}

// TestCrashHarnessWindowRetention kills the writing process of a windowed
// table with retention at random moments (mid-batch, during checkpoints,
// undo, and the deletes of expired windows) while input arrives: in the
// end the windows past retention are gone and every other is exact. (The
// final run stops only once the table is exact: with undo off it double
// counts and runs until the harness kills it, "child still running".)
func TestCrashHarnessWindowRetention(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a job process many times")
	}
	h := newHarness(t, 2, modeWindow)
	h.run(false)
	want := crashWindowsLeft(crashCount)
	if err := sameRows(windowTable(h.table()), want); err != nil {
		t.Fatalf("seed %d: %v", h.seed, err)
	}
}
