package runtime

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestTaskTimeAccounting: each period counts toward what the task did, an
// ongoing source read toward nothing until it returns (busy with records,
// idle without), so no total ever goes back. In a synctest bubble the clock
// moves only when the test sleeps.
func TestTaskTimeAccounting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c taskTime
		check := func(step string, busy, bp, idle time.Duration) {
			t.Helper()
			b, p, i := c.totals()
			if b != busy || p != bp || i != idle {
				t.Fatalf("%s: busy %s, backpressured %s, idle %s; want %s, %s, %s", step, b, p, i, busy, bp, idle)
			}
		}
		time.Sleep(time.Second) // not running yet: counts nothing
		check("before the start", 0, 0, 0)
		c.enter(working)
		time.Sleep(2 * time.Millisecond)
		check("working", 2*time.Millisecond, 0, 0)
		c.enter(readingSource)
		time.Sleep(5 * time.Millisecond)
		check("in a read", 2*time.Millisecond, 0, 0)
		c.endRead(false)
		check("after an empty read", 2*time.Millisecond, 0, 5*time.Millisecond)
		c.enter(readingSource)
		time.Sleep(time.Millisecond)
		c.enter(waitingForOutput) // the read got records and sends them
		time.Sleep(7 * time.Millisecond)
		check("sending a read's records", 3*time.Millisecond, 7*time.Millisecond, 5*time.Millisecond)
		c.enter(working)
		time.Sleep(time.Millisecond)
		c.endRead(true)
		c.enter(waitingForInput)
		time.Sleep(3 * time.Millisecond)
		c.enter(notRunning)
		time.Sleep(time.Second)
		check("stopped", 4*time.Millisecond, 7*time.Millisecond, 8*time.Millisecond)
	})
}
