package repartition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/export"
)

// Stage2 is one incarnation of a scaled job's stage 2: a job reading the
// owned repartition partitions into the table (a *runtime.Job).
type Stage2 interface {
	// Run runs it until it ends, Stop is called (with a final checkpoint)
	// or ctx ends (without).
	Run(ctx context.Context) error
	Stop()
}

// ownersHeartbeat is the heartbeat interval of the owners group. A member
// learns that the group rebalances (another left, joined or was dropped)
// from a heartbeat's answer, so a handover waits up to one interval for
// it: with the client's default, 3s, a failover on Apache Kafka took 3.1 s
// from the owner's end to the next owner's first write, of which 0.14 s
// was the handover itself. A heartbeat is one small request per member.
const ownersHeartbeat = 500 * time.Millisecond

// OwnersConfig configures dynamic ownership (Owners).
type OwnersConfig struct {
	// Owner says who this instance is and where the owner log is; Owners
	// sets its Clear.
	Owner OwnerConfig
	// Table is the instance's table.
	Table *aggmerge.Table
	// Group is the consumer group whose assignment of the repartition
	// topic's partitions is the ownership: "<job>.owners".
	Group string
	// SessionTimeout is the group's session timeout (franz-go's default,
	// 45s, when 0): how long a member that vanished (SIGKILL) keeps its
	// partitions before the group gives them to the others.
	SessionTimeout time.Duration
	// Stage2 makes stage 2 over the partitions owned (none: it only
	// restores and undoes), reading partition p from resume[p] on every
	// start, restore included (kafka.Config.StartOnRestore), and recording
	// its positions at each checkpoint in positions.
	Stage2 func(owned []int32, resume map[int32]int64, positions *kafka.Positions) (Stage2, error)
	// Writers are stage 2's exactly-once writers (Router.Groups): a
	// checkpoint is published once each marked it.
	Writers []WriterGroup
	// Changelog, if set, is the table's changelog: each bucket's Publisher
	// writes it in its owner-log transactions, so it moves with the bucket
	// (on the repartition topic's cluster; created with one partition per
	// bucket, compacted, when absent).
	Changelog *Changelog
	// Logger and Metrics, if set, receive what the handovers do.
	Logger  *slog.Logger
	Metrics *Metrics
}

// Owners runs stage 2 of a scaled job under dynamic ownership
// (docs/SCALING.md, "Dynamic ownership"): the instance is a member of the
// group <job>.owners over the repartition topic (cooperative-sticky), and
// the partitions the group assigns it are the ones it owns. Stage 2 runs
// in incarnations, one per assignment: each starts with a handover (Take,
// with Clear) of every partition assigned, then stage 2 reads each from
// its Resume while a Publisher per partition publishes what it commits.
// When the assignment changes, the incarnation stops with a final
// checkpoint, its publishers publish it, and the next one starts; a
// revocation waits for that, so the next owner takes the partition over
// from the last checkpoint of this one. Buckets the instance does not own
// are empty in its table.
type Owners struct {
	cfg OwnersConfig
	log *slog.Logger

	changed chan struct{}    // the assignment grew (cap 1)
	revokes chan *revocation // partitions to give up, from the group's callbacks
	stop    chan struct{}    // closed by Stop
	once    sync.Once
	done    chan struct{} // closed when Run no longer handles revocations

	mu struct {
		sync.Mutex
		assigned map[int32]bool // what the group assigned
		owned    []int32        // what stage 2 applies now
		// changedAt is when the group's first change since the last start
		// of stage 2 was seen (zero: none): where a handover's time starts.
		changedAt time.Time
	}
}

// revocation is partitions the group takes away; done is closed once this
// instance no longer applies or publishes them.
type revocation struct {
	parts []int32
	lost  bool
	done  chan struct{}
}

// NewOwners returns the dynamic ownership of cfg.
func NewOwners(cfg OwnersConfig) *Owners {
	cfg.Owner.Clear = true
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &Owners{cfg: cfg, log: log, changed: make(chan struct{}, 1), revokes: make(chan *revocation),
		stop: make(chan struct{}), done: make(chan struct{})}
	o.mu.assigned = map[int32]bool{}
	return o
}

// Owned returns the partitions (buckets) whose rows this instance applies
// now, sorted: none during a handover.
func (o *Owners) Owned() []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.mu.owned)
}

// Stop asks Run to stop stage 2 with a final checkpoint, publish it and
// return.
func (o *Owners) Stop() { o.once.Do(func() { close(o.stop) }) }

func (o *Owners) setOwned(owned []int32) {
	o.mu.Lock()
	o.mu.owned = owned
	o.mu.Unlock()
	o.cfg.Metrics.ownedPartitions(len(owned))
}

// assigned is the group's OnPartitionsAssigned.
func (o *Owners) assigned(m map[string][]int32) {
	o.mu.Lock()
	for _, p := range m[o.cfg.Owner.Topic] {
		o.mu.assigned[p] = true
	}
	o.changedLocked()
	o.mu.Unlock()
	o.changedAgain()
}

// changedLocked records when the group's assignment changed, unless a
// change since the last start is recorded.
func (o *Owners) changedLocked() {
	if o.mu.changedAt.IsZero() {
		o.mu.changedAt = time.Now()
	}
}

// sinceChange returns when the first change since the last start of stage
// 2 was seen (now if none), and forgets it.
func (o *Owners) sinceChange() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	at := o.mu.changedAt
	o.mu.changedAt = time.Time{}
	if at.IsZero() {
		at = time.Now()
	}
	return at
}

// revoked is the group's OnPartitionsRevoked and OnPartitionsLost: it
// returns once this instance stopped applying the partitions (or Run
// ended), so that the group gives them to another only then.
func (o *Owners) revoked(ctx context.Context, m map[string][]int32, lost bool) {
	parts := m[o.cfg.Owner.Topic]
	if len(parts) == 0 {
		return
	}
	o.mu.Lock()
	o.changedLocked()
	o.mu.Unlock()
	r := &revocation{parts: parts, lost: lost, done: make(chan struct{})}
	select {
	case o.revokes <- r:
	case <-o.done:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-r.done:
	case <-o.done:
	}
}

// Run joins the group and runs stage 2 under its assignment until Stop
// (with a final checkpoint: nil, or its error) or ctx ends (without one).
// It returns an error when stage 2 or a handover fails, or when a
// publisher is fenced: a newer owner took one of its partitions while
// this instance still thought it owned it.
func (o *Owners) Run(ctx context.Context) error {
	cfg := o.cfg
	conn, err := cfg.Owner.Kafka.Options()
	if err != nil {
		return fmt.Errorf("owners: %w", err)
	}
	opts := append(conn,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Owner.Topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.WithLogger(kgoLogger{o.log}),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { o.assigned(m) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { o.revoked(ctx, m, false) }),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { o.revoked(ctx, m, true) }),
		kgo.HeartbeatInterval(ownersHeartbeat),
	)
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout))
	}
	// Stage 2 restores and undoes its last checkpoint before the instance
	// joins the group: a handover may then clear and rebuild any bucket.
	if err := o.incarnation(ctx, true, nil); err != nil {
		return err
	}
	// The group assigns the partitions of a topic that exists: the
	// repartition topic, one partition per bucket, as stage 1 makes it.
	if err := o.ensureTopic(ctx, conn); err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("owners: join group %q: %w", cfg.Group, err)
	}
	// The group's client only learns the assignment: stage 2 reads.
	cl.PauseFetchTopics(cfg.Owner.Topic)
	defer func() {
		close(o.done) // the revocations of the leave return at once
		cl.Close()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.stop:
			return nil
		case r := <-o.revokes:
			o.give(r)
			o.changedAgain() // its buckets are cleared at the next start
		case <-o.changed:
			if err := o.incarnation(ctx, false, o.assignment()); err != nil || o.stopped(ctx) {
				return err
			}
		}
	}
}

func (o *Owners) ensureTopic(ctx context.Context, conn []kgo.Opt) error {
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return fmt.Errorf("owners: %w", err)
	}
	defer cl.Close()
	adm, buckets := kadm.NewClient(cl), o.cfg.Table.Schema().Buckets
	if err := ensureTopic(ctx, adm, o.cfg.Owner.Topic, buckets); err != nil {
		return fmt.Errorf("owners: %w", err)
	}
	if c := o.cfg.Changelog; c != nil {
		compact := "compact" // both formats write a tombstone per delete
		t := export.Topic{Name: c.Topic, Partitions: buckets, Replication: -1, Config: map[string]*string{"cleanup.policy": &compact}, Table: c.Table}
		if err := export.EnsureTopic(ctx, adm, t, o.log); err != nil {
			return fmt.Errorf("owners: changelog: %w", err)
		}
	}
	return nil
}

func (o *Owners) stopped(ctx context.Context) bool {
	select {
	case <-o.stop:
		return true
	default:
		return ctx.Err() != nil
	}
}

// assignment returns what the group assigned, sorted.
func (o *Owners) assignment() []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.mu.assigned))
}

// give forgets revoked partitions (stage 2 does not run).
func (o *Owners) give(r *revocation) {
	// Lost (the session expired): a newer owner may hold them already, and
	// a publish of this instance since then was refused.
	o.log.Info("partitions given up", "partitions", r.parts, "lost", r.lost)
	o.mu.Lock()
	for _, p := range r.parts {
		delete(o.mu.assigned, p)
	}
	o.mu.Unlock()
	close(r.done)
}

// changedAgain makes Run start the next incarnation.
func (o *Owners) changedAgain() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// incarnation runs stage 2 over owned until the assignment changes, Stop
// or ctx; with settle, it only restores, undoes and stops (with a final
// checkpoint).
func (o *Owners) incarnation(ctx context.Context, settle bool, owned []int32) error {
	cfg := o.cfg
	m := cfg.Metrics
	since := o.sinceChange()
	if !settle {
		m.rebalance()
		// A bucket this instance does not own is empty in its table.
		for b := range cfg.Table.Schema().Buckets {
			if !slices.Contains(owned, int32(b)) {
				if err := o.clear(b); err != nil {
					return err
				}
			}
		}
	}
	positions := kafka.NewPositions()
	resume := map[int32]int64{}
	var hs []*Handover
	defer func() {
		for _, h := range hs {
			h.Close()
		}
	}()
	for _, p := range owned {
		h, err := Take(ctx, cfg.Owner, cfg.Table, p)
		if err != nil {
			return fmt.Errorf("owners: %w", err)
		}
		hs = append(hs, h)
		resume[p] = h.Resume
		m.rebuilt(h.Rebuilt)
		o.log.Info("partition taken over", "partition", p, "epoch", h.Epoch, "owner_log_records", h.Read, "rows_rebuilt", h.Rebuilt, "resume", h.Resume)
	}
	if !settle {
		if err := o.hold(hs); err != nil {
			return err
		}
	}
	st, err := cfg.Stage2(append([]int32{}, owned...), resume, positions)
	if err != nil {
		return fmt.Errorf("owners: stage 2: %w", err)
	}
	if settle {
		st.Stop()
		if err := st.Run(ctx); err != nil {
			return fmt.Errorf("owners: restore stage 2: %w", err)
		}
		return nil
	}
	pubs := make([]*Publisher, len(hs))
	for i, h := range hs {
		if pubs[i], err = NewPublisher(h, cfg.Table, positions, cfg.Writers, cfg.Changelog); err != nil {
			return fmt.Errorf("owners: %w", err)
		}
		pubs[i].metrics = m
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done2 := make(chan error, 1)
	go func() { done2 <- st.Run(runCtx) }()
	pubCtx, stopPub := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPub()
	donePub := make(chan error, len(hs))
	for _, pb := range pubs {
		go func() { donePub <- pb.Run(pubCtx) }()
	}
	o.setOwned(owned)
	m.handover(time.Since(since))
	o.log.Info("stage 2 applies its partitions", "partitions", owned, "handover", time.Since(since))

	// stopAll stops stage 2 (gracefully unless ctx ended), then the
	// publishers, which publish its last checkpoint, and returns the
	// first error.
	stopAll := func(stage2 error, ended bool) error {
		o.setOwned(nil)
		if !ended {
			st.Stop()
			stage2 = <-done2
		}
		stopPub()
		errs := []error{stage2}
		for range hs {
			if err := <-donePub; err != nil {
				errs = append(errs, fmt.Errorf("owners: %w", err))
			}
		}
		return errors.Join(errs...)
	}
	for {
		select {
		case <-ctx.Done():
			cancel()
			return stopAll(<-done2, true)
		case <-o.stop:
			return stopAll(nil, false)
		case <-o.changed:
			// Assigned more: the next incarnation takes them over too.
			o.changedAgain()
			return stopAll(nil, false)
		case r := <-o.revokes:
			err := stopAll(nil, false)
			if err == nil {
				for _, p := range r.parts {
					err = errors.Join(err, o.clear(int(p)))
				}
			}
			o.give(r)
			if err == nil {
				o.changedAgain() // start again on what remains
			}
			return err
		case err := <-done2:
			if err == nil {
				err = errors.New("stage 2 ended")
			}
			return stopAll(fmt.Errorf("owners: stage 2: %w", err), true)
		case err := <-donePub:
			donePub <- nil // stopAll waits for every publisher
			return stopAll(fmt.Errorf("owners: %w", err), false)
		}
	}
}

// hold holds the log of each taken bucket from where its Publisher starts
// (PublisherHold), before stage 2 writes (and truncates) it, and releases
// the other buckets' logs.
func (o *Owners) hold(hs []*Handover) error {
	t := o.cfg.Table
	from := make(map[int]uint64, t.Schema().Buckets)
	for b := range t.Schema().Buckets {
		_, end, err := t.LogOffsets(b)
		if err != nil {
			return fmt.Errorf("owners: %w", err)
		}
		from[b] = end
	}
	for _, h := range hs {
		from[int(h.Partition)] = h.From
	}
	if err := t.Hold(PublisherHold, from); err != nil {
		return fmt.Errorf("owners: hold the log: %w", err)
	}
	return nil
}

// clear empties a bucket the instance does not own (a no-op when empty).
func (o *Owners) clear(bucket int) error {
	t := o.cfg.Table
	b, err := t.NewBatch(aggmerge.Writer{ID: o.cfg.Owner.rebuildWriter()}, nil)
	if err != nil {
		return err
	}
	n, err := clearBucket(t, b, bucket, func() error {
		if b.Len() == 0 {
			return nil
		}
		_, err := t.Apply(b)
		b.Reset()
		return err
	})
	if err == nil && n > 0 {
		err = t.Sync()
		o.log.Info("bucket given up: its rows cleared", "bucket", bucket, "rows", n)
	}
	if err != nil {
		return fmt.Errorf("owners: %w", err)
	}
	return nil
}
