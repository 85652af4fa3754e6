package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/state"
)

// ErrDecode marks a record that the source's format could not decode, under
// the Fail policy.
var ErrDecode = errors.New("kafka: undecodable record")

// pollWait bounds one wait for fetches, so that Read returns promptly when
// there is no data.
const pollWait = 20 * time.Millisecond

// maxRemembered bounds the checkpoints whose offsets wait for completion to
// be committed to the group.
const maxRemembered = 16

// Source reads Kafka topics into a job. Add it with
// runtime.FromSource(job, name, src.New); each subtask reads the partitions
// SubtaskFor assigns it.
type Source[T any] struct {
	cfg    Config
	re     *regexp.Regexp
	format Format[T]
	timeOf func(r *kgo.Record, v T) (int64, error) // with cfg.EventTime
	mu     struct {
		sync.Mutex
		live map[*reader[T]]struct{}
	}
	rounds alignRounds // with cfg.Align
}

// NewSource validates cfg and returns the source. format decodes the record
// values (Rows, JSON, JSONWith, Raw, or WithMetadata of one of them).
func NewSource[T any](cfg Config, format Format[T], opts ...Option[T]) (*Source[T], error) {
	cfg, re, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	if cfg.TLS != nil {
		if _, err := cfg.TLS.config(); err != nil {
			return nil, fmt.Errorf("kafka source: %w", err)
		}
	}
	s := &Source[T]{cfg: cfg, re: re, format: format, timeOf: kafkaTimestamp[T]}
	s.rounds.wait = cfg.AlignInterval
	for _, o := range opts {
		o(s)
	}
	s.mu.live = make(map[*reader[T]]struct{})
	return s, nil
}

// New makes one subtask; it is the factory runtime.FromSource takes.
func (s *Source[T]) New() runtime.Source[T] { return &reader[T]{src: s} }

// String describes the source's configuration, secrets redacted.
func (s *Source[T]) String() string { return s.cfg.String() }

// Healthy reports whether every open subtask reaches the brokers; the
// message names the failing subtasks and their last error.
func (s *Source[T]) Healthy() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var bad []string
	for r := range s.mu.live {
		if ok, msg := r.health.status(); !ok {
			bad = append(bad, fmt.Sprintf("subtask %d: %s", r.subtask, msg))
		}
	}
	if len(bad) > 0 {
		return false, strings.Join(bad, "; ")
	}
	return true, "ok"
}

// pendingPart is the rest of one partition's fetched records, not yet
// handed out.
type pendingPart struct {
	ps   *partState
	recs []*kgo.Record
	// read (with Cuts): held-back records taken again, after which the
	// partition is back where it had read to (those between were handed
	// out before).
	read int64
}

// remembered are the offsets of a checkpoint awaiting completion.
type remembered struct {
	id      barrier.CheckpointID
	offsets kadm.Offsets
}

// reader is one source subtask. Read, Snapshot, NotifyComplete run on the
// task goroutine; the discoverer and committer goroutines only exchange
// values with it through their own locks.
type reader[T any] struct {
	src     *Source[T]
	decode  Decoder[T]
	log     *slog.Logger
	subtask int
	cl      *kgo.Client
	adm     *kadm.Client
	m       *metrics
	health  *health
	topics  *topics
	warnLog *limitedLog

	parts   map[topicPartition]*partState
	pending []pendingPart // from the last poll; pending[head:] not handed out
	head    int
	snaps   []remembered
	dlq     *DeadLetterWriter
	reading int          // bounded: partitions not done
	reached []*partState // bounded: fetched up to their stop by the last poll

	wms   *watermark.Splits        // with EventTime: per partition
	times map[topicPartition]int64 // restored: each partition's largest event time
	al    *aligner                 // with Align
	floor map[topicPartition]int64 // with Align: every partition's restored offset
	ct    *cutter                  // with Cuts
	// restored with Cuts: the round, and per partition the stretches
	// handed out.
	round cutRound
	skips map[topicPartition][]cutSkip

	disc   *discoverer
	commit *committer
	bg     context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

func (r *reader[T]) Open(ctx *runtime.Context) (err error) {
	cfg := &r.src.cfg
	r.subtask = ctx.Subtask
	r.log = ctx.Logger
	r.warnLog = newLimitedLog(r.log, 10*time.Second)
	r.decode = r.src.format()
	if r.m, err = newMetrics(ctx.Registerer); err != nil {
		return fmt.Errorf("kafka source: register metrics: %w", err)
	}
	r.health = &health{fetchErrors: r.m.fetchErrors, log: r.warnLog}
	r.topics = &topics{names: cfg.Topics, pattern: r.src.re, partitions: cfg.Partitions, subtask: ctx.Subtask, par: ctx.Parallelism, log: r.log}
	r.parts = make(map[topicPartition]*partState)
	if cfg.EventTime != nil {
		r.wms = watermark.NewSplits(cfg.EventTime.MaxOutOfOrderness, cfg.EventTime.IdleTimeout)
	}

	opts, err := cfg.connOptions()
	if err != nil {
		return fmt.Errorf("kafka source: %w", err)
	}
	isolation := kgo.ReadCommitted()
	if cfg.ReadUncommitted {
		isolation = kgo.ReadUncommitted()
	}
	// A partition added while a fetch to its broker long-polls waits for
	// that fetch to end: franz-go's 5 s MaxWait would stall partitions that
	// start at their earliest offset (their start is listed first) behind
	// idle ones, so wait no longer than the Java client's 500 ms. A
	// discovered partition is fetched after the client's next metadata
	// refresh, at most MetadataMinAge after it is added (5 s by default).
	opts = append(opts, kgo.FetchIsolationLevel(isolation), kgo.WithHooks(r.health),
		kgo.FetchMaxWait(500*time.Millisecond), kgo.MetadataMinAge(time.Second))
	if cfg.Bounded {
		// A transaction marker may be the last offset before the stop:
		// seeing it tells that the position reached the stop.
		opts = append(opts, kgo.KeepControlRecords())
	}
	opts = append(opts, cfg.ClientOptions...)
	if r.cl, err = kgo.NewClient(opts...); err != nil {
		return fmt.Errorf("kafka source: new client: %w", err)
	}
	r.adm = kadm.NewClient(r.cl)
	r.bg, r.stop = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			r.stop()
			r.cl.Close()
			r.cl = nil
		}
	}()

	if cfg.Align != nil {
		if r.al, err = newAligner(ctx, &r.src.rounds, cfg.Topics, ctx.Registerer); err != nil {
			return fmt.Errorf("kafka source: align: %w", err)
		}
	}
	start, stops, err := r.startOffsets(ctx)
	if err != nil {
		return err
	}
	if cfg.Cuts != nil {
		if r.ct, err = newCutter(ctx, cfg.Cuts, r.round); err != nil {
			return fmt.Errorf("kafka source: cuts: %w", err)
		}
	}
	if r.al != nil {
		r.src.rounds.begin(ctx.Attempt, r.floor)
	}
	from := make(map[string]map[int32]kgo.Offset)
	for tp, off := range start {
		stop, ok := stops[tp]
		if !ok {
			stop = noStop
		}
		r.addPart(tp, off, stop, from)
	}
	r.cl.AddConsumePartitions(from)
	r.log.Info("kafka source opened", "config", cfg.String(), "partitions", len(r.parts), "restored", ctx.RestoredOK)

	if cfg.OnDecodeError == DeadLetter {
		if err := PrepareDeadLetterTopic(ctx.Context(), r.adm, cfg.DeadLetterTopic, r.log.Warn); err != nil {
			return fmt.Errorf("kafka source: %w", err)
		}
		r.dlq = NewDeadLetterWriter(r.bg, r.cl, cfg.DeadLetterTopic, r.m.deadLettered)
	}
	if !cfg.Bounded {
		r.disc = &discoverer{topics: r.topics, adm: r.adm, every: cfg.DiscoveryInterval, log: r.warnLog}
		r.goBackground(r.disc.run)
	}
	if cfg.Group != "" {
		r.commit = newCommitter(r.adm, cfg.Group, r.warnLog)
		r.goBackground(r.commit.run)
	}
	if r.al != nil {
		r.goBackground(func(ctx context.Context) {
			if err := cfg.Align.Follow(ctx, cfg.Topics, r.al.found); err != nil && ctx.Err() == nil {
				r.al.fail(fmt.Errorf("kafka source: follow the versions of %v: %w", cfg.Topics, err))
			}
		})
	}
	r.src.mu.Lock()
	r.src.mu.live[r] = struct{}{}
	r.src.mu.Unlock()
	return nil
}

func (r *reader[T]) goBackground(f func(context.Context)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f(r.bg)
	}()
}

// startOffsets returns where each partition of this subtask begins: the
// checkpointed offsets on restore (no broker needed), else the start
// position resolved against the brokers. A bounded source also gets the
// stop offset of each: the checkpointed ones, else the end offsets now.
func (r *reader[T]) startOffsets(ctx *runtime.Context) (start, stops map[topicPartition]int64, err error) {
	cfg := &r.src.cfg
	restored := false
	if ctx.RestoredOK && cfg.StartOnRestore {
		defer func() {
			if err == nil && cfg.Positions != nil {
				cfg.Positions.restored(ctx.Restored, start)
			}
		}()
	}
	if ctx.RestoredOK && !cfg.StartOnRestore {
		all, err := decodeOffsets(ctx.State.Unions[offsetsUnion])
		if err != nil {
			return nil, nil, err
		}
		r.times = all.times
		r.floor = all.next
		r.round, r.skips = all.round, all.skips
		if all.ok {
			if cfg.Positions != nil {
				cfg.Positions.restored(ctx.Restored, all.next)
			}
			mine := r.topics.reads
			start = make(map[topicPartition]int64)
			if cfg.Bounded && all.bounded {
				stops = make(map[topicPartition]int64)
				for tp, stop := range all.stops {
					if !mine(tp) {
						continue
					}
					next, ok := all.next[tp]
					if !ok {
						return nil, nil, fmt.Errorf("restore kafka offsets: %s has a stop offset but no offset: %w", tp, state.ErrCorrupt)
					}
					start[tp], stops[tp] = next, stop
				}
				return start, stops, nil
			}
			for tp, off := range all.next {
				if mine(tp) {
					start[tp] = off
				}
			}
			if !cfg.Bounded {
				return start, nil, nil
			}
			restored = true
		}
	}
	// Bounded by StartTimeout, and by the run: cancelling it ends the wait.
	deadline, cancel := context.WithTimeout(ctx.Context(), cfg.StartTimeout)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		owned, _, err := r.topics.owned(deadline, r.adm)
		var at map[topicPartition]int64
		if err == nil && !restored {
			at, err = resolveStart(deadline, r.adm, cfg.Start, cfg.Group, !cfg.ReadUncommitted, owned)
		}
		if err == nil && restored {
			// As discovery would: partitions created while down start
			// at the earliest offset.
			at = maps.Clone(start)
			for tp := range owned {
				if _, ok := at[tp]; !ok {
					at[tp] = atEarliest
				}
			}
		}
		if err == nil && cfg.Bounded {
			stops, err = resolveStops(deadline, r.adm, !cfg.ReadUncommitted, at)
		}
		if err == nil {
			return at, stops, nil
		}
		r.warnLog.warn("kafka source: resolving start offsets failed; retrying", "error", err)
		select {
		case <-deadline.Done():
			return nil, nil, fmt.Errorf("kafka source: resolve start offsets (%s) within %s: %w", cfg.Start, cfg.StartTimeout, err)
		case <-time.After(backoff):
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// addPart starts tracking a partition and, unless it is done (a bounded
// partition at its stop), adds it to from, the offsets to give the client.
func (r *reader[T]) addPart(tp topicPartition, next, stop int64, from map[string]map[int32]kgo.Offset) {
	ps := &partState{tp: tp, next: next, read: next, skips: r.skips[tp], stop: stop, lag: r.m.lag.WithLabelValues(tp.topic, strconv.Itoa(int(tp.partition)))}
	r.parts[tp] = ps
	if r.al != nil {
		ps.hold = holdOf(r.al.target, ps)
	}
	if r.wms != nil {
		restored, ok := r.times[tp]
		if !ok {
			restored = watermark.Min
		}
		ps.wm = r.wms.Add(restored, time.Now())
	}
	if stop != noStop {
		if next >= stop {
			ps.done = true
			r.doneWatermark(ps)
			return
		}
		r.reading++
	}
	o := kgo.NewOffset().At(next)
	if next == atEarliest {
		o = kgo.NewOffset().AtStart()
	}
	if from[tp.topic] == nil {
		from[tp.topic] = make(map[int32]kgo.Offset)
	}
	from[tp.topic][tp.partition] = o
}

func (r *reader[T]) Read(buf []T) ([]T, error) {
	if r.ct != nil && r.ct.open {
		r.cutWait()
		return buf, nil
	}
	r.addDiscovered()
	if r.al != nil {
		if err := r.alignStep(); err != nil {
			return buf, err
		}
	}
	if r.head == len(r.pending) {
		if r.src.cfg.Bounded && r.reading == 0 {
			return buf, io.EOF
		}
		if err := r.poll(); err != nil {
			return buf, err
		}
	}
	var nrec, nbytes int
	var err error
	for len(buf) < cap(buf) && r.head < len(r.pending) && err == nil {
		pp := &r.pending[r.head]
		buf, err = r.take(pp, buf, &nrec, &nbytes)
		if len(pp.recs) == 0 {
			if pp.read > 0 {
				pp.ps.took(pp.read - 1)
			}
			r.head++
		}
	}
	if r.head == len(r.pending) {
		clear(r.pending)
		r.pending, r.head = r.pending[:0], 0
		r.finishReached()
		if r.al != nil && r.atCut() {
			r.al.gate.Open()
		}
	}
	if nrec > 0 {
		r.m.records.Add(float64(nrec))
		r.m.bytes.Add(float64(nbytes))
	}
	return buf, err
}

// take hands out records of one partition while buf has room. A record
// counts as handed out once decoded, dropped or dead-lettered; the
// partition's next offset follows the last one.
func (r *reader[T]) take(pp *pendingPart, buf []T, nrec, nbytes *int) ([]T, error) {
	recs := pp.recs
	n := 0
	var err error
	// The largest event time taken goes to the partition's tracker once,
	// not per record.
	top, timed := watermark.Min, false
	ps := pp.ps
	for n < len(recs) && len(buf) < cap(buf) {
		rec := recs[n]
		v, derr := r.decode(rec)
		var ts int64
		if derr == nil && ps.wm != nil {
			if ts, derr = r.src.timeOf(rec, v); derr == nil {
				top, timed = max(top, ts), true
			} else {
				derr = fmt.Errorf("event time: %w", derr)
			}
		}
		switch {
		case derr != nil && r.ct != nil && ps.replayed(rec.Offset):
			// Dealt with before the restored checkpoint.
		case derr != nil:
			err = r.undecodable(rec, derr)
		case r.ct != nil:
			buf = r.cutRecord(ps, rec, v, ts, buf)
		default:
			buf = append(buf, v)
		}
		if err != nil {
			break
		}
		if pp.read == 0 { // held-back records taken again were counted once
			*nbytes += len(rec.Key) + len(rec.Value)
			*nrec++
		}
		n++
		if r.ct != nil {
			ps.took(rec.Offset)
		}
	}
	if timed {
		ps.wm.Observe(top)
	}
	if n > 0 && r.ct == nil {
		ps.next = recs[n-1].Offset + 1
	}
	pp.recs = recs[n:]
	return buf, err
}

// undecodable applies the error policy; under Fail it returns the error
// that fails the job, and the record stays unread.
func (r *reader[T]) undecodable(rec *kgo.Record, err error) error {
	switch r.src.cfg.OnDecodeError {
	case Skip:
		r.m.dropped.Inc()
		r.warnLog.warn("kafka source: dropped an undecodable record", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "error", err)
		return nil
	case DeadLetter:
		r.dlq.Write(rec, nil, err)
		return nil
	}
	// A restart would read the same record again: fail for good.
	return runtime.Permanent(fmt.Errorf("%w: topic %q partition %d offset %d: %w", ErrDecode, rec.Topic, rec.Partition, rec.Offset, err))
}

// poll waits up to pollWait for fetches and queues their records.
func (r *reader[T]) poll() error {
	ctx, cancel := context.WithTimeout(r.bg, pollWait)
	fetches := r.cl.PollFetches(ctx)
	cancel()
	var fatal error
	readCommitted := !r.src.cfg.ReadUncommitted
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Err != nil {
			if err := r.fetchError(p.Topic, p.Partition, p.Err); err != nil && fatal == nil {
				fatal = err
			}
		}
		if len(p.Records) == 0 {
			return
		}
		ps := r.parts[topicPartition{p.Topic, p.Partition}]
		if ps == nil {
			fatal = fmt.Errorf("kafka source: fetched %s/%d, which subtask %d does not read", p.Topic, p.Partition, r.subtask)
			return
		}
		end := p.HighWatermark
		if readCommitted {
			end = p.LastStableOffset
		}
		ps.lag.Set(float64(max(0, end-(p.Records[len(p.Records)-1].Offset+1))))
		recs := p.Records
		if ps.stop != noStop {
			recs = r.bound(ps, recs)
		}
		if r.al != nil {
			recs = r.holdBack(ps, recs)
		}
		if len(recs) > 0 {
			r.pending = append(r.pending, pendingPart{ps: ps, recs: recs})
		}
	})
	return fatal
}

// bound drops the fetched records of a bounded partition at or past its
// stop, and the transaction markers. Any record at or past the stop, marker
// or not, shows that the position reached it: the partition is done once
// the records kept are handed out.
func (r *reader[T]) bound(ps *partState, recs []*kgo.Record) []*kgo.Record {
	if ps.done {
		return nil // fetched before its removal took effect
	}
	reached := recs[len(recs)-1].Offset+1 >= ps.stop
	keep := recs[:0]
	for _, rec := range recs {
		if rec.Offset < ps.stop && !rec.Attrs.IsControl() {
			keep = append(keep, rec)
		}
	}
	if reached {
		r.reached = append(r.reached, ps)
	}
	return keep
}

// finishReached marks done the bounded partitions whose records up to the
// stop are all handed out, and stops fetching them.
func (r *reader[T]) finishReached() {
	if len(r.reached) == 0 {
		return
	}
	remove := make(map[string][]int32)
	for _, ps := range r.reached {
		if ps.done {
			continue
		}
		ps.done = true
		ps.next = ps.stop // markers or aborted records may lie before it
		ps.lag.Set(0)
		r.doneWatermark(ps)
		r.reading--
		remove[ps.tp.topic] = append(remove[ps.tp.topic], ps.tp.partition)
		r.log.Info("kafka source: partition read to its stop offset", "topic", ps.tp.topic, "partition", ps.tp.partition, "stop", ps.stop, "left", r.reading)
	}
	clear(r.reached)
	r.reached = r.reached[:0]
	if len(remove) > 0 {
		r.cl.RemoveConsumePartitions(remove)
	}
}

// doneWatermark stops a partition read to its stop from holding the
// watermark back: it will deliver nothing more.
func (r *reader[T]) doneWatermark(ps *partState) {
	if ps.wm != nil {
		r.wms.Remove(ps.wm)
	}
}

// fetchError classifies a partition error of a fetch: the client already
// retries what can be retried, so only a closed client ends Read.
func (r *reader[T]) fetchError(topic string, partition int32, err error) error {
	var loss *kgo.ErrDataLoss
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return nil // our poll timeout
	case errors.Is(err, kgo.ErrClientClosed):
		return fmt.Errorf("kafka source: %w", err)
	case errors.As(err, &loss):
		r.m.fetchErrors.Inc()
		r.log.Error("kafka source: broker lost data; the client reset the partition's position", "topic", topic, "partition", partition, "error", err)
		return nil
	}
	r.health.fail(fmt.Sprintf("fetch %s/%d", topic, partition), err)
	return nil
}

// addDiscovered starts reading partitions the discoverer found, from their
// earliest offset.
func (r *reader[T]) addDiscovered() {
	if r.disc == nil {
		return // bounded: no discovery
	}
	found, ok := r.disc.take()
	if !ok {
		return
	}
	from := make(map[string]map[int32]kgo.Offset)
	for tp := range found {
		if _, have := r.parts[tp]; !have {
			r.addPart(tp, atEarliest, noStop, from)
			r.log.Info("kafka source: new partition, reading from the earliest offset", "topic", tp.topic, "partition", tp.partition)
		}
	}
	r.cl.AddConsumePartitions(from)
}

func (r *reader[T]) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	if r.dlq != nil {
		ctx, cancel := context.WithTimeout(r.bg, commitTimeout)
		err := r.dlq.Flush(ctx)
		cancel()
		if err != nil {
			return state.OperatorState{}, err
		}
	}
	if r.commit != nil {
		if len(r.snaps) == maxRemembered {
			r.snaps = append(r.snaps[:0], r.snaps[1:]...)
		}
		r.snaps = append(r.snaps, remembered{id: id, offsets: groupOffsets(r.parts)})
	}
	if p := r.src.cfg.Positions; p != nil {
		p.snapshot(id, r.parts)
	}
	var round *cutRound
	if r.ct != nil {
		round = &cutRound{boundary: r.ct.boundary, atCut: r.ct.open}
	}
	st := state.OperatorState{Unions: map[string][][]byte{offsetsUnion: encodeOffsets(r.parts, r.src.cfg.Bounded, r.wms != nil, round)}}
	if r.al != nil {
		r.al.snapshot(id)
	}
	if r.ct != nil {
		r.cutSnapshot(id)
	}
	return st, nil
}

// NotifyComplete commits the offsets of checkpoint id (or of the latest
// one before it still remembered) to the group, for monitoring.
func (r *reader[T]) NotifyComplete(id barrier.CheckpointID) error {
	if r.commit == nil {
		return nil
	}
	var latest kadm.Offsets
	keep := r.snaps[:0]
	for _, s := range r.snaps {
		if s.id <= id {
			latest = s.offsets
		} else {
			keep = append(keep, s)
		}
	}
	r.snaps = keep
	if latest != nil {
		r.commit.submit(latest)
	}
	return nil
}

func (r *reader[T]) Close() error {
	r.src.mu.Lock()
	delete(r.src.mu.live, r)
	r.src.mu.Unlock()
	if r.stop != nil {
		r.stop()
	}
	r.wg.Wait()
	if r.cl != nil {
		r.cl.Close()
	}
	return nil
}
