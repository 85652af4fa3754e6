package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// Exporter publishes one table's changelog to a Kafka topic, exactly once.
// Run does the work; RetainFrom tells log retention what it still needs.
type Exporter struct {
	cfg     Config
	buckets int
	owned   []int // the buckets exported (Config.Buckets, else all)
	enc     encoder
	log     *slog.Logger
	m       *metrics
	former  []string // FormerTransactionalIDs not closed yet (Run's goroutine)
	fold    *fold    // committed mode: a range's changes, one per key (Run's goroutine)

	mu struct {
		sync.Mutex
		retain     []uint64      // per bucket: the lowest log offset still needed
		done       []uint64      // per bucket: exported or passed over below this
		lastCommit time.Time     // of the last committed transaction
		version    Version       // the last version published (Version 0: none)
		kept       []keptVersion // ver.kept, for RowsAt
	}
	ver versionState // Run's goroutine only
	// failBeforeCommit, set by tests, is called after a transaction's
	// records and version (if any) were produced, before the commit: an
	// error fails the transaction.
	failBeforeCommit func(version *Version) error
}

// New checks cfg and makes an exporter; nothing connects before Run.
func New(cfg Config) (*Exporter, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, err := cfg.Kafka.Options(); err != nil {
		return nil, fmt.Errorf("changelog exporter: %w", err)
	}
	m, err := newMetrics(cfg.Registerer, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("changelog exporter: register metrics: %w", err)
	}
	x := &Exporter{cfg: cfg, buckets: cfg.Table.Schema().Buckets, m: m,
		log: cfg.Logger.With("table", cfg.Name, "topic", cfg.Topic)}
	codec, _ := cfg.Format.codec() // validated
	x.enc = encoder{schema: cfg.Table.Schema(), table: cfg.Name, id: cfg.Table.ID().String(), txnID: cfg.TransactionalID,
		codec: codec, topic: cfg.Topic, now: cfg.Now}
	x.fold = newFold(cfg.Table)
	x.former = slices.DeleteFunc(slices.Clone(cfg.FormerTransactionalIDs), func(id string) bool { return id == cfg.TransactionalID })
	if err := cfg.Registerer.Register(newFreshnessMetric(x)); err != nil {
		return nil, fmt.Errorf("changelog exporter: register metrics: %w", err)
	}
	x.owned = slices.Clone(cfg.Buckets)
	if x.owned == nil {
		x.owned = make([]int, x.buckets)
		for b := range x.owned {
			x.owned[b] = b
		}
	}
	x.mu.retain = make([]uint64, x.buckets)
	x.mu.done = make([]uint64, x.buckets)
	// Hold the log from its start at once, before a writer's retention may
	// truncate it, and while Run finds, from the topic, where it stands.
	start := map[int]uint64{}
	for _, b := range x.owned {
		s, _, err := cfg.Table.LogOffsets(b)
		if err != nil {
			return nil, err
		}
		start[b] = s
	}
	if err := cfg.Table.Hold(x.Holder(), start); err != nil {
		return nil, fmt.Errorf("changelog exporter: hold the log of %q: %w", cfg.Name, err)
	}
	return x, nil
}

// RetainFrom returns, per bucket, the lowest log offset the exporter may
// still read, also after a restart. The exporter records it as its hold on
// the table's log (Table.Hold under Holder), so Table.TruncateHeld never
// drops what it has not exported. Before Run has resumed it is 0.
func (x *Exporter) RetainFrom() []uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]uint64(nil), x.mu.retain...)
}

// Exported returns, per bucket, the log offset below which every entry
// has been exported (in a committed transaction) or passed over for good:
// the exporter has caught up with a bucket when it equals its log end.
// A committed entry may not be visible at once: Kafka acknowledges a commit
// before it has written the markers that let read_committed consumers see
// its records.
func (x *Exporter) Exported() []uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]uint64(nil), x.mu.done...)
}

// LastCommit returns when the exporter last committed a transaction; zero
// before its first.
func (x *Exporter) LastCommit() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.mu.lastCommit
}

// Holder is the exporter's retention holder on the table: its
// transactional id. An exporter removed for good must release it
// (Table.ReleaseHold), or the log is kept for it forever.
func (x *Exporter) Holder() string { return x.cfg.TransactionalID }

// Run exports until ctx is done (then it returns nil) or a fatal error
// (ErrPartitions, ErrGap, ErrMismatch, ErrFenced, or the table closed). A
// failed transaction re-initialises the producer and resumes from what the
// topic holds, with a backoff. Run starts no goroutine that outlives it.
func (x *Exporter) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := x.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrPartitions) || errors.Is(err, ErrGap) || errors.Is(err, ErrMismatch) || errors.Is(err, ErrFenced) || errors.Is(err, aggmerge.ErrClosed) {
			return err
		}
		x.log.Warn("changelog export failed; re-initialising the producer", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// session runs one producer: init (fencing zombies), resume, export rounds.
func (x *Exporter) session(ctx context.Context) error {
	conn, err := x.cfg.Kafka.Options()
	if err != nil {
		return err
	}
	x.m.reinits.Inc()
	cl, err := kgo.NewClient(append(conn[:len(conn):len(conn)],
		kgo.TransactionalID(x.cfg.TransactionalID),
		kgo.TransactionTimeout(transactionTimeout(x.cfg.CheckpointInterval)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// kadm's lookups use cached metadata: a topic looked up before it
		// was created (the versions topic) would look absent for the
		// default 5 s.
		kgo.MetadataMinAge(100*time.Millisecond),
	)...)
	if err != nil {
		return fmt.Errorf("make producer: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := x.ensureTopic(ctx, adm, x.cfg.Topic, x.buckets, x.cfg.TopicConfig); err != nil {
		return err
	}
	// Before loading the producer id, which fences whoever holds this
	// transactional id: a topic whose records come from another table is
	// refused without touching its exporter.
	last, err := x.readLast(ctx, adm, conn)
	if err != nil {
		return err
	}
	if err := x.checkOwner(last); err != nil {
		return err
	}
	if err := x.closeFormer(ctx, conn); err != nil {
		return err
	}
	// Loading the producer id fences an older exporter with this
	// transactional id and aborts its open transaction, so what the topic
	// holds from here on is final.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("init producer %q: %w", x.cfg.TransactionalID, classify(err))
	}
	if last, err = x.readLast(ctx, adm, conn); err != nil {
		return err
	}
	cs, err := x.cursors(last)
	if err != nil {
		return err
	}
	if err := x.resumeVersions(ctx, adm, conn, last); err != nil {
		return err
	}
	if err := x.publish(cs); err != nil {
		return err
	}
	x.log.Info("changelog export resumed", "mode", x.cfg.Mode, "format", x.cfg.Format, "transactional_id", x.cfg.TransactionalID)
	tick := time.NewTicker(x.cfg.PollInterval)
	defer tick.Stop()
	for {
		n, err := x.round(ctx, cl, cs)
		if err != nil {
			return err
		}
		if n > 0 {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// round selects up to MaxRecordsPerTxn changes, shared among the buckets
// with entries to export (their partitions are produced to in parallel;
// what a bucket leaves of its share goes to the others), and produces each
// as it is selected, in one transaction: the selection
// of the next changes overlaps the produce requests of the earlier ones.
// It returns the records committed.
func (x *Exporter) round(ctx context.Context, cl *kgo.Client, cs []*cursor) (int, error) {
	held := map[int]uint64{} // by cursor: the restart point of its bucket's last record
	// The writers' checkpoints before the log ends: their commit markers
	// are below the ends (see writerCheckpoints).
	var ws writers
	if x.cfg.versionsOn() {
		ws = x.currentWriters()
	}
	ends := x.cfg.Table.LogEnds()
	pending := 0
	for _, c := range cs {
		if c.done < ends[c.bucket] {
			pending++
		}
	}
	if x.cfg.Mode == Uncommitted && pending > 0 {
		// The table's writes are unsynced until a checkpoint: a SIGKILL may
		// lose the last ones. Export only what is durable, never an entry
		// the table could write differently after a restart.
		if err := x.cfg.Table.Sync(); err != nil {
			return 0, err
		}
	}
	tx := &txn{ctx: ctx, cl: cl, topic: x.cfg.Topic, ends: slices.Clone(x.ver.ends)}
	if pending > 0 {
		// First a share of the budget for every bucket with entries, then
		// what they left for those that have more: a round that can take
		// all that is pending does (a version point needs every bucket
		// caught up), and otherwise every partition gets records.
		budget := x.cfg.MaxRecordsPerTxn
		share := (budget + pending - 1) / pending
		var recs []*kgo.Record
		for pass := range 2 {
			for i, c := range cs {
				left := budget - tx.records
				if c.done >= ends[c.bucket] || left <= 0 {
					continue
				}
				if pass == 0 {
					left = min(left, share)
				}
				emit := func(ch *change) error {
					recs = x.enc.records(recs[:0], c.bucket, ch)
					held[i] = ch.resume
					for _, r := range recs {
						if err := tx.produce(r); err != nil {
							return err
						}
					}
					return nil
				}
				var err error
				if x.cfg.Mode == Uncommitted {
					err = selectUncommitted(x.cfg.Table, c, ends[c.bucket], left, emit)
				} else {
					err = selectCommitted(x.cfg.Table, c, ends[c.bucket], left, x.fold, emit)
				}
				if err != nil {
					x.abort(tx)
					return 0, fmt.Errorf("read table %q bucket %d: %w", x.cfg.Name, c.bucket, err)
				}
			}
		}
	}
	due, err := x.dueVersion(ctx, cs, ends, ws)
	if err != nil {
		x.abort(tx)
		return 0, err
	}
	if err := x.commit(tx, due); err != nil {
		return 0, err
	}
	for i, off := range held {
		cs[i].held = off
	}
	if err := x.publish(cs); err != nil {
		return 0, err
	}
	for _, c := range cs {
		x.m.lag.WithLabelValues(strconv.Itoa(c.bucket)).Set(float64(ends[c.bucket] - min(c.done, ends[c.bucket])))
	}
	return tx.records, nil
}

// txn is one export transaction: its records are produced as they are
// selected, the transaction begun with the first.
type txn struct {
	ctx     context.Context
	cl      *kgo.Client
	topic   string // the changelog topic
	open    bool   // begun
	records int    // changelog records produced
	mu      sync.Mutex
	err     error   // the first produce error
	ends    []int64 // per partition: past the last changelog record acknowledged
}

// produce produces r, beginning the transaction if it is not yet.
func (t *txn) produce(r *kgo.Record) error {
	if !t.open {
		if err := t.cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		t.open = true
	}
	if r.Topic == t.topic {
		t.records++
	}
	t.cl.Produce(t.ctx, r, t.acked)
	return nil
}

func (t *txn) acked(r *kgo.Record, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.err = firstErr(t.err, err)
		return
	}
	if r.Topic == t.topic {
		t.ends[r.Partition] = max(t.ends[r.Partition], r.Offset+1)
	}
}

// flush waits until every record produced is acknowledged and returns the
// first error.
func (t *txn) flush() error {
	err := t.cl.Flush(t.ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	return firstErr(err, t.err)
}

// commit commits tx, with the version due (if any, and if it holds
// anything new) produced last, its end offsets those of the transaction's
// records: the version and the changelog up to it commit together or not
// at all. With neither records nor a version to publish it does nothing.
// On any error it aborts, and the caller re-initialises the producer: a
// transaction whose outcome is unknown is never retried blindly, the next
// session reads what the topic holds instead.
func (x *Exporter) commit(tx *txn, due *Version) error {
	err := tx.flush()
	var vr *kgo.Record
	if err == nil {
		vr, err = x.versionRecord(due, tx.ends)
	}
	if err == nil && vr == nil && !tx.open {
		return nil
	}
	if err == nil && vr != nil {
		if err = tx.produce(vr); err == nil {
			err = tx.flush()
		}
	}
	if err == nil && x.failBeforeCommit != nil {
		var v *Version
		if vr != nil {
			v = due
		}
		err = x.failBeforeCommit(v)
	}
	if err == nil {
		err = tx.cl.EndTransaction(tx.ctx, kgo.TryCommit)
	}
	if err != nil {
		x.abort(tx)
		return fmt.Errorf("export transaction of %d records: %w", tx.records, classify(err))
	}
	x.ver.ends = tx.ends
	x.m.transactions.Inc()
	x.m.records.Add(float64(tx.records))
	x.mu.Lock()
	x.mu.lastCommit = time.Now()
	x.mu.Unlock()
	if vr != nil {
		return x.published(due)
	}
	return nil
}

// abort aborts tx if it was begun: its buffered records are dropped.
func (x *Exporter) abort(tx *txn) {
	if !tx.open {
		return
	}
	x.m.aborts.Inc()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tx.ctx), 10*time.Second)
	defer cancel()
	if err := tx.cl.AbortBufferedRecords(ctx); err == nil {
		_ = tx.cl.EndTransaction(ctx, kgo.TryAbort)
	}
}

// publish records where a restarted exporter would read from (the restart
// points of the partitions' last committed records) as the exporter's hold
// on the log, where they moved, and makes them visible to RetainFrom.
func (x *Exporter) publish(cs []*cursor) error {
	x.mu.Lock()
	for _, c := range cs {
		x.mu.done[c.bucket] = c.done
	}
	moved := map[int]uint64{}
	for _, c := range cs {
		if x.mu.retain[c.bucket] != c.held {
			moved[c.bucket] = c.held
		}
	}
	x.mu.Unlock()
	if len(moved) == 0 {
		return nil
	}
	// Hold before publishing: RetainFrom never says more than the hold.
	if err := x.cfg.Table.Hold(x.Holder(), moved); err != nil {
		return fmt.Errorf("hold the log of %q: %w", x.cfg.Name, err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for b, off := range moved {
		x.mu.retain[b] = off
	}
	return nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// classify marks the errors that mean another exporter with the same
// transactional id took over: its InitProducerID bumped the epoch, so ours
// is refused (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH on produce).
// Re-initialising would fence it in turn, and the two would take turns
// forever; the older one stops instead. A transaction the broker aborted
// on timeout (an exporter stalled longer than the transaction timeout)
// looks the same and stops the exporter too: its owner restarts it.
func classify(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return err
}
