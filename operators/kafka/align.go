package kafka

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
)

// Boundary is where a version of an ebbflow changelog ends.
type Boundary struct {
	Topic   string
	Version uint64
	// EndOffsets holds, per partition, the offset just past the last
	// record the version includes.
	EndOffsets []int64
}

// Boundaries follows the versions of ebbflow changelog topics for an
// aligned source (Config.Align); sink/aggmerge/export.VersionBoundaries
// reads them from the versions topics.
type Boundaries interface {
	// Follow reads the versions of topics, from the oldest kept, until ctx
	// ends, calling found (on one goroutine) with each version committed,
	// in the order of its topic's versions. It retries what a retry can
	// mend, and returns ctx's error or one a retry cannot mend.
	Follow(ctx context.Context, topics []string, found func(Boundary)) error
}

// alignKept bounds the versions an aligned subtask keeps per topic.
const alignKept = 1000

// alignFirst is the key of an attempt's first round.
const alignFirst = -1

// alignRound is the stretch of input between two checkpoints of an
// aligned source: every subtask reads from floor up to target, a version
// boundary, and holds there until the checkpoint that ends the round.
// Until due (when the checkpoint is due) the target is provisional: it
// moves on to each newer version known, and the subtasks read up to it
// but open no gate; from due on it is final. So the cut takes the newest
// version known when the checkpoint is due, not the one known right after
// the previous checkpoint (which made each aligned hop lag up to a whole
// interval more: docs/BENCHMARKS.md).
type alignRound struct {
	after  int64 // the checkpoint the round follows (alignFirst: none)
	floor  map[topicPartition]int64
	exact  bool                     // floor is a boundary (a target, or nothing read)
	due    time.Time                // from then on the target, once decided, is final
	target map[topicPartition]int64 // nil: not decided yet; never changed in place
	final  bool
	closed bool // ended undecided: it stays so (the next round's floor is its floor)
}

// alignRounds are the rounds of the attempt, shared by a source's
// subtasks: the first subtask that needs a round's target decides it, from
// the versions it knows, any subtask moves it on until it is final, and
// every subtask reads to the same one.
type alignRounds struct {
	// wait is how long after a round starts its target is final: the
	// job's checkpoint interval (Config.AlignInterval).
	wait time.Duration
	mu   struct {
		sync.Mutex
		attempt int
		rounds  []alignRound // the newest few
	}
}

// begin starts the rounds of attempt at floor (every partition's
// position), unless a subtask of that attempt did.
func (s *alignRounds) begin(attempt int, floor map[topicPartition]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.mu.rounds) > 0 && s.mu.attempt == attempt {
		return
	}
	exact := true
	for _, off := range floor {
		exact = exact && off <= 0
	}
	s.mu.attempt = attempt
	s.mu.rounds = []alignRound{{after: alignFirst, floor: floor, exact: exact}}
}

// target returns the target of the round after checkpoint after (the
// first call after that checkpoint starts the round, at now), moving it
// on with decide until it is final; ok is false while it is not decided.
func (s *alignRounds) target(after int64, now time.Time, decide func(floor map[topicPartition]int64, exact bool) (map[topicPartition]int64, bool)) (target map[topicPartition]int64, final, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.mu.rounds, func(r alignRound) bool { return r.after == after })
	if i < 0 {
		last := &s.mu.rounds[len(s.mu.rounds)-1]
		if after < last.after {
			return nil, false, false // older than the rounds kept: cannot happen
		}
		next := alignRound{after: after, floor: last.target, exact: true, due: now.Add(s.wait)}
		if last.target == nil {
			last.closed = true
			next.floor, next.exact = last.floor, last.exact
		}
		s.mu.rounds = append(s.mu.rounds, next)
		if len(s.mu.rounds) > 4 {
			s.mu.rounds = slices.Delete(s.mu.rounds, 0, len(s.mu.rounds)-4)
		}
		i = len(s.mu.rounds) - 1
	}
	r := &s.mu.rounds[i]
	if !r.final && !r.closed {
		if t, ok := decide(r.floor, r.exact); ok {
			r.target = further(r.target, t)
		}
		r.final = r.target != nil && !now.Before(r.due)
	}
	return r.target, r.final, r.target != nil
}

// further returns the target that reaches both t and u (nil: none): each
// partition at the larger end offset. Versions of a changelog only grow,
// so that is the newer version's boundary in every partition; t is not
// modified (subtasks read it).
func further(t, u map[topicPartition]int64) map[topicPartition]int64 {
	if t == nil {
		return u
	}
	out := maps.Clone(t)
	for tp, end := range u {
		out[tp] = max(out[tp], end)
	}
	return out
}

// aligner is a subtask's side of Config.Align.
type aligner struct {
	rounds *alignRounds
	topics []string
	gate   *runtime.CutGate
	held   prometheus.Histogram // ebbflow_alignment_hold_seconds
	after  int64                // the round: the checkpoint it follows
	target map[topicPartition]int64
	final  bool      // target is the round's final one
	due    time.Time // when the round's target becomes final (about)
	seen   uint64    // mu.found when the target was last asked for
	mu     struct {
		sync.Mutex
		known map[string][]Boundary // per topic, oldest first
		found uint64                // versions found so far
		err   error                 // Follow failed
	}
}

func newAligner(ctx *runtime.Context, rounds *alignRounds, topics []string, reg prometheus.Registerer) (*aligner, error) {
	gate, err := ctx.CutGate()
	if err != nil {
		return nil, err
	}
	a := &aligner{rounds: rounds, topics: topics, gate: gate, after: alignFirst,
		held: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ebbflow_alignment_hold_seconds",
			Help:    "Time a partition of an aligned source was held at an upstream version boundary, with records past it fetched, until the checkpoint there let it read on.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)})}
	a.mu.known = map[string][]Boundary{}
	if err := reg.Register(a.held); err != nil {
		return nil, err
	}
	return a, nil
}

// found is Boundaries.Follow's callback.
func (a *aligner) found(b Boundary) {
	a.mu.Lock()
	defer a.mu.Unlock()
	vs := a.mu.known[b.Topic]
	if n := len(vs); n > 0 && b.Version <= vs[n-1].Version {
		return
	}
	a.mu.found++
	vs = append(vs, b)
	if len(vs) > alignKept {
		vs = slices.Delete(vs, 0, len(vs)-alignKept)
	}
	a.mu.known[b.Topic] = vs
}

func (a *aligner) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mu.err = err
}

// failed returns Follow's error, and how many versions were found.
func (a *aligner) failed() (found uint64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.found, a.mu.err
}

// decide picks the target of a round starting at floor: per topic, the
// newest version known whose end offsets are at or past floor in every
// partition. A topic without one stays where it is when floor is a
// boundary (exact); otherwise the round cannot be decided yet.
func (a *aligner) decide(floor map[topicPartition]int64, exact bool) (map[topicPartition]int64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	target := map[topicPartition]int64{}
	for _, topic := range a.topics {
		vs := a.mu.known[topic]
		i := len(vs) - 1
		for ; i >= 0 && !reaches(vs[i], floor); i-- {
		}
		if i < 0 {
			if !exact {
				return nil, false
			}
			for tp, off := range floor {
				if tp.topic == topic {
					target[tp] = max(off, 0)
				}
			}
			continue
		}
		for p, end := range vs[i].EndOffsets {
			target[topicPartition{topic, int32(p)}] = end
		}
	}
	return target, true
}

// reaches reports whether v's end offsets are at or past floor in every
// partition of v's topic.
func reaches(v Boundary, floor map[topicPartition]int64) bool {
	for tp, off := range floor {
		if tp.topic != v.Topic || off <= 0 {
			continue
		}
		if int(tp.partition) >= len(v.EndOffsets) || v.EndOffsets[tp.partition] < off {
			return false
		}
	}
	return true
}

// holdOf is where a partition holds in a round with target (nil: not
// decided: where it is).
func holdOf(target map[topicPartition]int64, ps *partState) int64 {
	if target == nil {
		return max(ps.next, 0)
	}
	return max(target[ps.tp], ps.hold) // never back: a target is at or past the floor
}

// alignStep follows the round's target until it is final, and lets the
// partitions read up to it.
func (r *reader[T]) alignStep() error {
	a := r.al
	found, err := a.failed()
	if err != nil {
		return err
	}
	if a.final {
		return nil
	}
	// Another subtask may move the target on too; this one asks when it
	// knows a new version, and at every Read once the round is due.
	now := time.Now()
	if a.target != nil && found == a.seen && now.Before(a.due) {
		return nil
	}
	a.seen = found
	target, final, ok := a.rounds.target(a.after, now, a.decide)
	if !ok {
		return nil
	}
	a.final = final
	if maps.Equal(target, a.target) {
		return nil
	}
	a.target = target
	// A partition the version has and the subtask does not know yet (its
	// topic was created after the source opened, and discovery has not
	// found it): read it, or the cut would miss its part of the version.
	from := make(map[string]map[int32]kgo.Offset)
	for tp := range target {
		if _, ok := r.parts[tp]; !ok && r.topics.reads(tp) {
			r.addPart(tp, atEarliest, noStop, from)
			r.log.Info("kafka source: partition of an upstream version, reading from the earliest offset", "topic", tp.topic, "partition", tp.partition)
		}
	}
	if len(from) > 0 {
		r.cl.AddConsumePartitions(from)
	}
	resume := map[string][]int32{}
	for _, ps := range r.parts {
		ps.hold = holdOf(target, ps)
		if len(ps.held) == 0 {
			continue
		}
		i := slices.IndexFunc(ps.held, func(rec *kgo.Record) bool { return rec.Offset >= ps.hold })
		if i < 0 {
			i = len(ps.held)
		}
		if i > 0 {
			r.pending = append(r.pending, pendingPart{ps: ps, recs: ps.held[:i]})
			ps.held = ps.held[i:]
		}
		if len(ps.held) == 0 {
			ps.held = nil
			resume[ps.tp.topic] = append(resume[ps.tp.topic], ps.tp.partition)
			a.held.Observe(now.Sub(ps.heldSince).Seconds())
		}
	}
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(resume)
	}
	return nil
}

// holdBack keeps the records of a fetch at or past the partition's hold
// offset in the partition (paused: fetched no further) and returns the
// others.
func (r *reader[T]) holdBack(ps *partState, recs []*kgo.Record) []*kgo.Record {
	if len(ps.held) > 0 {
		ps.held = append(ps.held, recs...) // fetched before the pause took effect
		return nil
	}
	i := slices.IndexFunc(recs, func(rec *kgo.Record) bool { return rec.Offset >= ps.hold })
	if i < 0 {
		return recs
	}
	ps.held = slices.Clone(recs[i:])
	ps.heldSince = time.Now()
	r.cl.PauseFetchPartitions(map[string][]int32{ps.tp.topic: {ps.tp.partition}})
	return recs[:i]
}

// atCut reports, once every record fetched before the holds is handed
// out, whether every partition reached its hold offset in a decided
// round: its position is there, or a record at or past it was fetched
// (the records between were compacted away): then the position moves to
// the hold offset.
func (r *reader[T]) atCut() bool {
	if !r.al.final || r.head < len(r.pending) {
		return false
	}
	for _, ps := range r.parts {
		if max(ps.next, 0) < ps.hold && len(ps.held) == 0 {
			return false
		}
	}
	for _, ps := range r.parts {
		if ps.hold > 0 && ps.next < ps.hold {
			ps.next = ps.hold
		}
	}
	return true
}

// snapshot starts the next round: the checkpoint id cut the source
// where it is.
func (a *aligner) snapshot(id barrier.CheckpointID) {
	a.after, a.target, a.final = int64(id), nil, false
	a.due = time.Now().Add(a.rounds.wait)
}
