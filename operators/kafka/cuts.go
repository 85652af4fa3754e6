package kafka

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
)

// Cuts makes a source with event time cut the job's checkpoints on
// event-time boundaries, the multiples of every (NewCuts) since the Unix epoch (the
// timestamp barrier of docs/CONSISTENCY.md): the checkpoint of boundary t
// holds exactly the records with an event time at or before t. Give one
// Cuts to the Config of the job's one Kafka source; its subtasks share it.
//
// In each round, up to a boundary t, a subtask hands out the records at or
// before t and holds back those after it (records of one partition may
// come out of order, within the source's bound). A partition whose
// watermark passed t is paused; once every partition of every subtask
// passed t or is idle (and one of them passed it), the subtasks emit the
// watermark t and open their cut gates (eager: the checkpoint is taken at
// once, whatever the interval). At its snapshot there a subtask records
// the cut (At), hands out the records held back that are at or before
// t+every, and reads on.
//
// A checkpoint holds, per partition, the offset of the first record not
// handed out and the stretches of records after it that were (those at or
// before the round's boundary), so that a restore replays exactly the
// records held back. A stop cuts between two boundaries: its checkpoint is
// no cut (At returns 0).
//
// Cuts are decided in the process: the subtasks of the source must run in
// one process (not with scale-out over several).
type Cuts struct {
	every int64 // ns
	mu    struct {
		sync.Mutex
		attempt int
		begun   bool
		first   int64 // the attempt's first boundary (0: not decided)
		passed  int64 // the newest boundary every subtask passed
		reports map[int]cutReport
		at      map[barrier.CheckpointID]int64
	}
}

// cutReport is what a subtask last told of its round.
type cutReport struct {
	boundary int64
	ready    bool // every partition passed the boundary or is idle; everything fetched before is handed out
	active   bool // a partition passed it: the job's watermark is at or past it
}

// cutRound is a subtask's round as its checkpoint holds it: the boundary,
// and whether the subtask was at the cut (the checkpoint is the cut).
type cutRound struct {
	boundary int64
	atCut    bool
}

// cutSkip is a stretch of a partition handed out before a restored
// checkpoint: the records below offset below with an event time at or
// before boundary.
type cutSkip struct{ below, boundary int64 }

// NewCuts returns the cuts of a job whose boundaries are every apart (at
// least 1 ms, whole milliseconds).
func NewCuts(every time.Duration) (*Cuts, error) {
	if every < time.Millisecond || every%time.Millisecond != 0 {
		return nil, fmt.Errorf("kafka cuts: every %s: want whole milliseconds, at least 1ms", every)
	}
	c := &Cuts{every: int64(every)}
	c.mu.at = map[barrier.CheckpointID]int64{}
	return c, nil
}

// At returns the boundary (Unix milliseconds) checkpoint id cut the input
// at, 0 when it is not a cut (the initial checkpoint, a stop's); ok is
// false when id was not taken or restored in this process (or is older
// than the newest 256).
func (c *Cuts) At(id barrier.CheckpointID) (ms int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ms, ok = c.mu.at[id]
	return ms, ok
}

// begin starts the attempt's rounds, unless a subtask of that attempt did.
func (c *Cuts) begin(attempt int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.begun && c.mu.attempt == attempt {
		return
	}
	c.mu.begun, c.mu.attempt = true, attempt
	c.mu.first, c.mu.passed = 0, 0
	c.mu.reports = map[int]cutReport{}
}

// firstBoundary returns the attempt's first boundary, deciding it from ts,
// the event time of the first record a subtask takes, if no subtask did:
// the first multiple of Every after ts. ts 0 asks without deciding.
func (c *Cuts) firstBoundary(ts int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.first == 0 && ts != 0 {
		f := ts - ts%c.every
		if ts%c.every < 0 {
			f -= c.every // floor before the epoch
		}
		c.mu.first = f + c.every
	}
	return c.mu.first
}

// report records subtask's state in its round and reports whether every
// one of the parallelism subtasks passed boundary (once true, it stays so).
func (c *Cuts) report(subtask, parallelism int, r cutReport) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.reports[subtask] = r
	if c.mu.passed >= r.boundary {
		return true
	}
	if len(c.mu.reports) < parallelism {
		return false
	}
	active := false
	for _, o := range c.mu.reports {
		if o.boundary != r.boundary || !o.ready {
			return false
		}
		active = active || o.active
	}
	if active {
		c.mu.passed = r.boundary
	}
	return active
}

// snapshot records what a subtask's snapshot of id cut at: boundary ns, 0
// when it is not at a cut. The subtasks of one checkpoint agree, or it is
// no cut.
func (c *Cuts) snapshot(id barrier.CheckpointID, boundary int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := boundary / int64(time.Millisecond)
	if old, ok := c.mu.at[id]; ok && old != ms {
		ms = 0
	}
	c.mu.at[id] = ms
	c.trimLocked()
}

// restored records the restored checkpoint's cut and forgets the
// checkpoints after it (their ids will be reused).
func (c *Cuts) restored(id barrier.CheckpointID, r cutRound) {
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.DeleteFunc(c.mu.at, func(k barrier.CheckpointID, _ int64) bool { return k > id })
	c.mu.at[id] = 0
	if r.atCut {
		c.mu.at[id] = r.boundary / int64(time.Millisecond)
	}
	c.trimLocked()
}

func (c *Cuts) trimLocked() {
	for len(c.mu.at) > maxPositions {
		delete(c.mu.at, slices.Min(slices.Collect(maps.Keys(c.mu.at))))
	}
}

// cutter is a subtask's side of Config.Cuts.
type cutter struct {
	cuts        *Cuts
	gate        *runtime.CutGate
	parallelism int
	boundary    int64 // the round's (0: not decided yet)
	open        bool  // the gate is open: nothing is handed out until the snapshot
}

func newCutter(ctx *runtime.Context, cuts *Cuts, restored cutRound) (*cutter, error) {
	gate, err := ctx.CutGate()
	if err != nil {
		return nil, err
	}
	gate.Eager()
	cuts.begin(ctx.Attempt)
	ct := &cutter{cuts: cuts, gate: gate, parallelism: ctx.Parallelism, boundary: restored.boundary}
	if restored.atCut {
		ct.boundary += cuts.every
	}
	if ctx.RestoredOK {
		cuts.restored(ctx.Restored, restored)
	}
	return ct, nil
}

// skipped reports whether the record at off, of event time ts, was handed
// out before the restored checkpoint.
func (ps *partState) skipped(off, ts int64) bool {
	for _, sk := range ps.skips {
		if off < sk.below && ts <= sk.boundary {
			return true
		}
	}
	return false
}

// replayed reports whether the record at off was read before the restored
// checkpoint (and dealt with then, if it is undecodable).
func (ps *partState) replayed(off int64) bool {
	return slices.ContainsFunc(ps.skips, func(sk cutSkip) bool { return off < sk.below })
}

// replaying reports whether the partition has not read again everything
// the restored checkpoint had read.
func (ps *partState) replaying() bool { return ps.replayed(ps.read) }

// skipsAt returns the stretches a checkpoint of a round with boundary
// holds: the records before read at or before the boundary were handed
// out (those after it are held back), and the older stretches not read
// again yet.
func (ps *partState) skipsAt(boundary int64) []cutSkip {
	out := slices.Clone(ps.skips)
	if ps.read > ps.next {
		out = append(out, cutSkip{below: ps.read, boundary: boundary})
	}
	return out
}

// took moves the partition past the record taken at off. read is past the
// last record taken, in the order taken: below the records read before
// while held-back records are taken again (the stretch of the round before
// covers those between).
func (ps *partState) took(off int64) {
	ps.read = off + 1
	ps.skips = slices.DeleteFunc(ps.skips, func(sk cutSkip) bool { return sk.below <= ps.read })
	ps.next = ps.read
	if len(ps.ahead) > 0 {
		ps.next = ps.ahead[0].Offset
	}
}

// cutRecord hands out v (appending it to buf) unless it was handed out
// before the restore, or is past the round's boundary: then it is held
// back in the partition.
func (r *reader[T]) cutRecord(ps *partState, rec *kgo.Record, v T, ts int64, buf []T) []T {
	ct := r.ct
	if ps.skipped(rec.Offset, ts) {
		return buf
	}
	if ct.boundary == 0 {
		ct.boundary = ct.cuts.firstBoundary(ts)
	}
	if ts > ct.boundary {
		ps.ahead = append(ps.ahead, rec)
		return buf
	}
	return append(buf, v)
}

// cutWatermark is the watermark of a subtask with cuts: the partitions'
// (wm, idle), no later than the round's boundary (records past it are held
// back). It pauses the partitions that passed the boundary, tells the cuts
// where the subtask is, and opens the gate once every subtask passed it.
// The gate opens here, not in Read: the task emits the watermark returned
// before it takes the barrier, so the boundary goes out before the cut.
func (r *reader[T]) cutWatermark(wm int64, idle bool) (int64, bool) {
	ct := r.ct
	if ct.boundary == 0 {
		ct.boundary = ct.cuts.firstBoundary(0)
	}
	if ct.boundary == 0 {
		return watermark.Min, idle // nothing handed out yet
	}
	wm = min(wm, ct.boundary)
	if ct.open {
		return wm, idle
	}
	rep := cutReport{boundary: ct.boundary, ready: r.head == len(r.pending)}
	pause := map[string][]int32{}
	for _, ps := range r.parts {
		w, pidle := r.wms.Of(ps.wm)
		passed := w >= ct.boundary && !ps.replaying()
		if passed && !ps.paused {
			ps.paused = true
			pause[ps.tp.topic] = append(pause[ps.tp.topic], ps.tp.partition)
		}
		switch {
		case passed:
			rep.active = true
		case !pidle || ps.replaying():
			rep.ready = false
		}
	}
	if len(pause) > 0 {
		r.cl.PauseFetchPartitions(pause)
	}
	if passed := ct.cuts.report(r.subtask, ct.parallelism, rep); passed && rep.ready {
		ct.open = true
		ct.gate.Open()
	}
	return wm, idle
}

// cutWait is Read while the gate is open: nothing is handed out until the
// snapshot, so wait a poll's time rather than spin.
func (r *reader[T]) cutWait() {
	select {
	case <-r.bg.Done():
	case <-time.After(pollWait):
	}
}

// cutSnapshot ends the round at a snapshot of id: at the cut, the next
// round begins, with the records held back that are at or before its
// boundary handed out first.
func (r *reader[T]) cutSnapshot(id barrier.CheckpointID) {
	ct := r.ct
	if !ct.open {
		ct.cuts.snapshot(id, 0)
		return
	}
	ct.cuts.snapshot(id, ct.boundary)
	ct.open = false
	ct.boundary += ct.cuts.every
	resume := map[string][]int32{}
	now := time.Now()
	for _, ps := range r.parts {
		if len(ps.ahead) > 0 {
			// Taken again from the first held back: those between that
			// are at or before the old boundary were handed out.
			ps.skips = append(ps.skips, cutSkip{below: ps.read, boundary: ct.boundary - ct.cuts.every})
			r.pending = append(r.pending, pendingPart{ps: ps, recs: ps.ahead, read: ps.read})
			ps.read = ps.ahead[0].Offset
			ps.ahead = nil
		}
		if ps.paused {
			ps.paused = false
			ps.wm.Resume(now)
			resume[ps.tp.topic] = append(resume[ps.tp.topic], ps.tp.partition)
		}
	}
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(resume)
	}
}
