package runtime

import (
	"sync"
	"time"
)

// doing is what a subtask's goroutine does, for its time accounting.
type doing uint8

const (
	notRunning       doing = iota // before its first attempt, between attempts, after the end
	working                       // processing: busy
	waitingForOutput              // waiting for room in a full downstream gate: backpressured
	waitingForInput               // waiting for input, a timer or the coordinator: idle
	// readingSource: in a source's Read, which counts as busy if it returns
	// records and as idle if it returns none; decided when it returns.
	readingSource
)

// taskTime accounts a subtask's running time, over all attempts, as busy,
// backpressured or idle (like Flink's busyTimeMsPerSecond,
// backPressuredTimeMsPerSecond and idleTimeMsPerSecond, but as cumulative
// totals: a rate of them is the share per second).
//
// The task goroutine marks each change: a wait (empty gate, full gate, the
// mailbox), a source's Read, the start and end of an attempt; never a
// record. Readers (Status, the metrics) see the ongoing period added to its
// kind, except an ongoing Read, which counts toward nothing until it
// returns: so every total only grows. The clock is read under the lock, so
// that a reader never sees a period counted that a writer then shortens.
type taskTime struct {
	mu struct {
		sync.Mutex
		doing doing
		since time.Time
		busy  time.Duration
		bp    time.Duration
		idle  time.Duration
	}
}

// enter ends the current period (an ongoing Read counts as busy: it got
// records, as it is sending them) and begins d. A nil taskTime (tests
// building gates alone) counts nothing.
func (c *taskTime) enter(d doing) { c.switchTo(d, working) }

// endRead ends an ongoing Read: busy if it returned records, idle if not.
// It returns the time it read, which the task's watermark poll reuses
// instead of reading the clock again.
func (c *taskTime) endRead(got bool) time.Time {
	as := waitingForInput
	if got {
		as = working
	}
	return c.switchTo(working, as)
}

func (c *taskTime) switchTo(d, readAs doing) time.Time {
	if c == nil {
		return time.Now()
	}
	c.mu.Lock()
	now := time.Now()
	cur := c.mu.doing
	if cur == readingSource {
		cur = readAs
	}
	if p := c.bucketLocked(cur); p != nil {
		*p += now.Sub(c.mu.since)
	}
	c.mu.doing, c.mu.since = d, now
	c.mu.Unlock()
	return now
}

func (c *taskTime) bucketLocked(d doing) *time.Duration {
	switch d {
	case working:
		return &c.mu.busy
	case waitingForOutput:
		return &c.mu.bp
	case waitingForInput:
		return &c.mu.idle
	}
	return nil
}

// totals returns the busy, backpressured and idle time so far.
func (c *taskTime) totals() (busy, bp, idle time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	busy, bp, idle = c.mu.busy, c.mu.bp, c.mu.idle
	switch c.mu.doing {
	case working:
		busy += time.Since(c.mu.since)
	case waitingForOutput:
		bp += time.Since(c.mu.since)
	case waitingForInput:
		idle += time.Since(c.mu.since)
	}
	return busy, bp, idle
}
