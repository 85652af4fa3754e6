package writer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ProgressLog is a slog.Handler that keeps the progress the sink logs at
// the end of a restore ("undo finished"), for tests of this package and of
// writer_test. It is safe for concurrent use.
type ProgressLog struct {
	mu   sync.Mutex
	done []Progress
	ch   chan struct{} // one value per record, never blocking
}

// Progress is what one subtask's restore reports.
type Progress struct {
	Buckets, Scanned, Restored int64
}

func NewProgressLog() *ProgressLog { return &ProgressLog{ch: make(chan struct{}, 64)} }

func (l *ProgressLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *ProgressLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *ProgressLog) WithGroup(string) slog.Handler            { return l }

func (l *ProgressLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "undo finished" {
		return nil
	}
	var p Progress
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "buckets":
			p.Buckets = a.Value.Int64()
		case "entries_scanned":
			p.Scanned = a.Value.Int64()
		case "keys_restored":
			p.Restored = a.Value.Int64()
		}
		return true
	})
	l.mu.Lock()
	l.done = append(l.done, p)
	l.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
	default:
	}
	return nil
}

// Take returns the records so far and forgets them.
func (l *ProgressLog) Take() []Progress {
	l.mu.Lock()
	defer l.mu.Unlock()
	done := l.done
	l.done = nil
	return done
}

// WaitUndone waits until n subtasks logged the end of their restore and
// returns their progress summed.
func (l *ProgressLog) WaitUndone(n int) (Progress, error) {
	deadline := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		done := append([]Progress(nil), l.done...)
		l.mu.Unlock()
		if len(done) >= n {
			var sum Progress
			for _, p := range done {
				sum.Buckets += p.Buckets
				sum.Scanned += p.Scanned
				sum.Restored += p.Restored
			}
			return sum, nil
		}
		select {
		case <-l.ch:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			return Progress{}, fmt.Errorf("%d of %d subtasks finished undo in 30s", len(done), n)
		}
	}
}
