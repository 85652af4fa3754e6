package repartition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/operators/kafka"
)

// WriterConfig configures stage 1 of an instance.
type WriterConfig struct {
	// Kafka is how the writer reaches the cluster.
	Kafka kafka.Connection
	// Group is the consumer group that the job's instances share over the
	// input (the job's name).
	Group string
	// Input are the input topics.
	Input []string
	// Topic is the repartition topic. It is created with Partitions
	// partitions when missing; an existing topic with another count is
	// refused (a bucket would go to two owners).
	Topic string
	// Partitions is the repartition topic's partition count, 1 to Buckets
	// (Buckets when 0): bucket b goes to partition base.Owner(b, Partitions).
	Partitions int
	// Buckets is the table's bucket count.
	Buckets int
	// TransactionalID is fixed per instance: a restarted instance fences
	// its previous incarnation with it. Each job writing the table through
	// the hop has its own (and its own Group).
	TransactionalID string
	// Headers go with every partial row: the writing job and its columns
	// (Codec.Headers), which tell the bucket's owner whose row it is;
	// none for the owner job's own rows.
	Headers []kgo.RecordHeader
	// InstanceID, if set, makes the writer a static member of the group
	// (KIP-345): a restarted instance gets its input partitions back at
	// once, without a rebalance, and its previous incarnation is fenced.
	// A static member does not leave the group when it closes: its
	// partitions move to the others only after the session timeout.
	InstanceID string
	// TransactionTimeout bounds how long a transaction may stay open
	// before the broker aborts it (franz-go's default, 40s, when 0): more
	// than the time between two Checkpoints.
	TransactionTimeout time.Duration
	// SessionTimeout is the group's session timeout (franz-go's default,
	// 45s, when 0).
	SessionTimeout time.Duration
	// Logger receives franz-go's warnings and the writer's (nil: discard).
	Logger *slog.Logger
	// Metrics, if set, count the rows sent, the transactions and the
	// failures retried.
	Metrics *Metrics
	// Status, if set, receives the input partitions assigned and the
	// failures Run retries.
	Status *Status
	// OnError is what Run does with an input record that mapRecord fails
	// on: Fail (ErrRecord), Skip it (counted in the metrics), or
	// DeadLetter it to DeadLetterTopic, in the open transaction: the dead
	// letter is committed with the input offsets past its record, exactly
	// once.
	OnError         kafka.ErrorPolicy
	DeadLetterTopic string
}

// Errors of stage 1 that retrying cannot cure: Run returns them.
var (
	// ErrFenced: a newer incarnation of the instance (the same
	// transactional id or static member) runs elsewhere.
	ErrFenced = errors.New("repartition writer: fenced")
	// ErrRecord: the mapping of an input record failed (on_error: fail).
	ErrRecord = errors.New("repartition writer: an input record cannot be mapped")
	// ErrTopic: the repartition topic has another partition count.
	ErrTopic = errors.New("repartition writer: the repartition topic belongs to another configuration")
)

// Writer is stage 1 of an instance: it polls the input as a member of the
// group, sends partial rows to the partitions of their buckets, and commits
// both in one transaction per checkpoint. Poll, Send and Checkpoint must
// not be called concurrently (as franz-go's session requires); Send's
// writes complete in the background.
type Writer struct {
	cfg  WriterConfig
	sess *kgo.GroupTransactSession
	log  *slog.Logger

	mu      sync.Mutex
	sendErr error // the first failed write of the open transaction
}

// NewWriter makes sure the repartition topic exists with its partition
// count, joins the group and begins the first transaction.
func NewWriter(ctx context.Context, cfg WriterConfig) (*Writer, error) {
	if cfg.Partitions == 0 {
		cfg.Partitions = cfg.Buckets
	}
	switch {
	case cfg.Buckets <= 0:
		return nil, fmt.Errorf("repartition writer: %d buckets", cfg.Buckets)
	case cfg.Partitions < 0 || cfg.Partitions > cfg.Buckets:
		return nil, fmt.Errorf("repartition writer: %d partitions for %d buckets (want 1 to %d)", cfg.Partitions, cfg.Buckets, cfg.Buckets)
	case cfg.Group == "" || cfg.Topic == "" || cfg.TransactionalID == "" || len(cfg.Input) == 0:
		return nil, errors.New("repartition writer: Group, Topic, TransactionalID and Input are required")
	case cfg.OnError == kafka.DeadLetter && cfg.DeadLetterTopic == "":
		return nil, errors.New("repartition writer: OnError DeadLetter needs a DeadLetterTopic")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conn, err := cfg.Kafka.Options()
	if err != nil {
		return nil, fmt.Errorf("repartition writer: %w", err)
	}
	if err := ensureTopics(ctx, conn, &cfg, log); err != nil {
		return nil, fmt.Errorf("repartition writer: %w", err)
	}
	w := &Writer{cfg: cfg, log: log}
	opts := append(conn,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Input...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.WithLogger(kgoLogger{log}),
	)
	if cfg.Status != nil {
		opts = append(opts,
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { w.assigned(m, true) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { w.assigned(m, false) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { w.assigned(m, false) }))
	}
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	if cfg.TransactionTimeout > 0 {
		opts = append(opts, kgo.TransactionTimeout(cfg.TransactionTimeout))
	}
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout))
	}
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, fmt.Errorf("repartition writer: %w", err)
	}
	w.sess = sess
	if err := sess.Begin(); err != nil {
		w.closeClient()
		return nil, fmt.Errorf("repartition writer: begin: %w", err)
	}
	return w, nil
}

// closeClient closes the session's client: the instance leaves the group
// (a static member keeps its place until the session timeout).
func (w *Writer) closeClient() {
	w.sess.Close()
	if st := w.cfg.Status; st != nil {
		st.left()
		w.cfg.Metrics.inputPartitions(st)
	}
}

// assigned records input partitions the group assigned (add) or took
// away.
func (w *Writer) assigned(m map[string][]int32, add bool) {
	st := w.cfg.Status
	if add {
		st.assign(m)
	} else {
		st.revoke(m)
	}
	w.cfg.Metrics.inputPartitions(st)
}

// ensureTopics creates the repartition topic with its partitions when
// missing and refuses one with another partition count, and makes sure
// the dead-letter topic (if any) exists.
func ensureTopics(ctx context.Context, conn []kgo.Opt, cfg *WriterConfig, log *slog.Logger) error {
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if cfg.OnError == kafka.DeadLetter {
		if err := kafka.PrepareDeadLetterTopic(ctx, adm, cfg.DeadLetterTopic, log.Warn); err != nil {
			return err
		}
	}
	return ensureTopic(ctx, adm, cfg.Topic, cfg.Partitions)
}

// ensureTopic creates topic with its partitions when missing and refuses
// one with another partition count (ErrTopic).
func ensureTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	n, err := kafka.EnsureTopic(ctx, adm, topic, int32(partitions))
	if err != nil {
		return err
	}
	if n != partitions {
		return fmt.Errorf("%w: topic %q has %d partitions, want %d (one per bucket, or buckets mod partitions)", ErrTopic, topic, n, partitions)
	}
	return nil
}

// Poll returns the next input records (waiting until some arrive or ctx
// ends: then it returns none and no error).
func (w *Writer) Poll(ctx context.Context) ([]*kgo.Record, error) {
	fs := w.sess.PollFetches(ctx)
	var errs []error
	fs.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			errs = append(errs, fmt.Errorf("poll %s/%d: %w", topic, p, err))
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, w.fenced(fmt.Errorf("repartition writer: %w", err))
	}
	return fs.Records(), nil
}

// fenced explains an error of a writer that a newer incarnation of its
// instance fenced, by its transactional id or its static group member.
func (w *Writer) fenced(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.FencedInstanceID) {
		return fmt.Errorf("%w: a newer incarnation of this instance (transactional id %q) runs elsewhere, so this one stops: %w",
			ErrFenced, w.cfg.TransactionalID, err)
	}
	return err
}

// Partition returns the repartition partition of an encoded primary key:
// that of its bucket.
func (w *Writer) Partition(key []byte) int32 {
	return int32(base.Owner(base.BucketOf(key, w.cfg.Buckets), w.cfg.Partitions))
}

// Send writes a partial row (record key: the encoded primary key) in the
// open transaction, to the partition of its bucket. A failed write makes
// the next Checkpoint abort and fail. The write lives until it is done or
// the writer is closed, whatever context the caller polls with.
func (w *Writer) Send(key, value []byte) {
	if m := w.cfg.Metrics; m != nil {
		m.sent.Inc()
	}
	w.produce(&kgo.Record{Topic: w.cfg.Topic, Partition: w.Partition(key), Key: key, Value: value, Headers: w.cfg.Headers})
}

// failed applies OnError to input record r, which mapRecord failed on
// with err: nil when it is skipped or dead-lettered (in the open
// transaction), else ErrRecord naming the record.
func (w *Writer) failed(r *kgo.Record, err error) error {
	m := w.cfg.Metrics
	switch w.cfg.OnError {
	case kafka.Skip:
		if m != nil {
			m.skipped.Inc()
		}
		return nil
	case kafka.DeadLetter:
		if m != nil {
			m.deadLettered.Inc()
		}
		w.produce(kafka.DeadLetterRecord(w.cfg.DeadLetterTopic, r, nil, err))
		return nil
	}
	return fmt.Errorf("%w: %s/%d@%d: %w", ErrRecord, r.Topic, r.Partition, r.Offset, err)
}

// produce writes r in the open transaction; a failure makes the next
// Checkpoint abort and fail.
func (w *Writer) produce(r *kgo.Record) {
	w.sess.Produce(context.Background(), r, func(r *kgo.Record, err error) {
		if err != nil {
			w.mu.Lock()
			if w.sendErr == nil {
				w.sendErr = fmt.Errorf("write to %s/%d: %w", r.Topic, r.Partition, err)
			}
			w.mu.Unlock()
		}
	})
}

// Checkpoint ends the open transaction and begins the next one. It
// commits the rows sent and the input offsets of every record polled, both
// or neither: committed is false when the group rebalanced since the
// transaction began, and then the input is polled again from the offsets of
// the last commit. A failed write aborts the transaction and is returned.
func (w *Writer) Checkpoint(ctx context.Context) (committed bool, err error) {
	w.mu.Lock()
	sendErr := w.sendErr
	w.mu.Unlock()
	// A failed produce fails the transaction in franz-go as well, but the
	// session's End would report only "not committed"; the write's error
	// says why.
	try := kgo.TryCommit
	if sendErr != nil {
		try = kgo.TryAbort
	}
	committed, err = w.sess.End(ctx, try)
	if st := w.cfg.Status; st != nil && err == nil && sendErr == nil {
		st.committed()
	}
	if m := w.cfg.Metrics; m != nil {
		if committed {
			m.committed.Inc()
		} else {
			m.aborted.Inc()
		}
	}
	w.mu.Lock()
	w.sendErr = nil
	w.mu.Unlock()
	if err != nil {
		return false, w.fenced(fmt.Errorf("repartition writer: end transaction: %w", err))
	}
	if sendErr != nil {
		return false, fmt.Errorf("repartition writer: transaction aborted: %w", sendErr)
	}
	if err := w.sess.Begin(); err != nil {
		return committed, fmt.Errorf("repartition writer: begin: %w", err)
	}
	if !committed {
		w.log.Info("repartition writer: transaction aborted after a rebalance; the input is read again from the last commit",
			"group", w.cfg.Group)
	}
	return committed, nil
}

// Close aborts the open transaction (what was sent since the last
// Checkpoint is never read) and leaves the group.
func (w *Writer) Close(ctx context.Context) error {
	_, err := w.sess.End(ctx, kgo.TryAbort)
	w.closeClient()
	if err != nil {
		return fmt.Errorf("repartition writer: abort on close: %w", err)
	}
	return nil
}

// kgoLogger passes franz-go's warnings and errors to a slog logger.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	l.log.Log(context.Background(), lv, "kafka: "+msg, keyvals...)
}

// closeTimeout bounds the abort of a failed session's transaction: with
// the broker away it cannot complete, and the next session's start aborts
// it instead (the same transactional id).
const closeTimeout = 10 * time.Second

// Run is stage 1's loop: it polls the input, hands each record to mapRecord
// (which sends the record's partial rows with send), and checkpoints every
// interval, until ctx ends; then it checkpoints what it has and closes the
// writer. An error of mapRecord goes to OnError; with Fail (ErrRecord), as
// an error of a poll, of a write or of a commit, it aborts the open
// transaction, closes the writer and is returned.
func (w *Writer) Run(ctx context.Context, every time.Duration, mapRecord func(r *kgo.Record, send func(key, value []byte)) error) error {
	abort := func(err error) error {
		end, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		return errors.Join(err, w.Close(end))
	}
	next := time.Now().Add(every)
	for ctx.Err() == nil {
		pctx, cancel := context.WithDeadline(ctx, next)
		recs, err := w.Poll(pctx)
		cancel()
		if err != nil {
			return abort(err)
		}
		for _, r := range recs {
			if err := mapRecord(r, w.Send); err != nil {
				if err := w.failed(r, err); err != nil {
					return abort(err)
				}
			}
		}
		if !time.Now().Before(next) {
			// A stop during the commit must not fail it: it ends the
			// loop after it instead.
			if err := w.checkpointBounded(ctx); err != nil {
				return abort(err)
			}
			next = time.Now().Add(every)
		}
	}
	// Stopped: commit what was polled and sent, then leave.
	if err := w.checkpointBounded(ctx); err != nil {
		return errors.Join(err, w.Close(context.WithoutCancel(ctx)))
	}
	end, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	return w.Close(end)
}

// Run runs stage 1 with cfg until ctx ends (nil, or the error of the last
// commit) or a failure that retrying cannot cure: ErrFenced, ErrRecord,
// ErrTopic. Any other failure, a broker outage above all (a poll, a write,
// a commit, or the start failing), ends the session: its open transaction
// is aborted (or, with the broker away, by the next session's start, which
// uses the same transactional id), and a new session starts after a
// backoff, 100 ms doubled up to 10 s, polling again from the last commit.
// Meanwhile cfg.Status says what fails and the metrics count it; the first
// commit of a new session ends the failure.
func Run(ctx context.Context, cfg WriterConfig, every time.Duration, mapRecord func(r *kgo.Record, send func(key, value []byte)) error) error {
	if cfg.Status == nil {
		cfg.Status = NewStatus()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	const minBackoff, maxBackoff = 100 * time.Millisecond, 10 * time.Second
	backoff := minBackoff
	for {
		w, err := NewWriter(ctx, cfg)
		if err == nil {
			err = w.Run(ctx, every, mapRecord)
		}
		if ctx.Err() != nil || errors.Is(err, ErrFenced) || errors.Is(err, ErrRecord) || errors.Is(err, ErrTopic) {
			return err
		}
		if ok, _ := cfg.Status.Health(); ok {
			backoff = minBackoff // it committed since the last failure
		}
		n := cfg.Status.failed(err)
		if m := cfg.Metrics; m != nil {
			m.failures.Inc()
		}
		log.Warn("stage 1 failed; a new session polls again from the last commit", "err", err, "failures_in_a_row", n, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// stopTimeout bounds a commit that a stop does not cancel.
const stopTimeout = 30 * time.Second

// checkpointBounded is Checkpoint bounded by stopTimeout instead of ctx.
func (w *Writer) checkpointBounded(ctx context.Context) error {
	end, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	_, err := w.Checkpoint(end)
	return err
}
