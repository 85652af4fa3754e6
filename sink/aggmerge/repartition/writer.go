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
	// its previous incarnation with it.
	TransactionalID string
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
	// Metrics, if set, count the rows sent and the transactions.
	Metrics *Metrics
}

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
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conn, err := cfg.Kafka.Options()
	if err != nil {
		return nil, fmt.Errorf("repartition writer: %w", err)
	}
	if err := ensureTopic(ctx, conn, cfg.Topic, cfg.Partitions); err != nil {
		return nil, fmt.Errorf("repartition writer: %w", err)
	}
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
	if err := sess.Begin(); err != nil {
		sess.Close()
		return nil, fmt.Errorf("repartition writer: begin: %w", err)
	}
	return &Writer{cfg: cfg, sess: sess, log: log}, nil
}

// ensureTopic creates topic with partitions when missing and refuses one
// with another partition count.
func ensureTopic(ctx context.Context, conn []kgo.Opt, topic string, partitions int) error {
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return err
	}
	defer cl.Close()
	n, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, int32(partitions))
	if err != nil {
		return err
	}
	if n != partitions {
		return fmt.Errorf("topic %q has %d partitions, want %d (one per bucket, or buckets mod partitions): "+
			"the topic belongs to another configuration", topic, n, partitions)
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
		return fmt.Errorf("repartition writer: fenced: a newer incarnation of this instance (transactional id %q) runs elsewhere, so this one stops: %w",
			w.cfg.TransactionalID, err)
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
	r := &kgo.Record{Topic: w.cfg.Topic, Partition: w.Partition(key), Key: key, Value: value}
	if m := w.cfg.Metrics; m != nil {
		m.sent.Inc()
	}
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
	w.sess.Close()
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

// Run is stage 1's loop: it polls the input, hands each record to mapRecord
// (which sends the record's partial rows with send), and checkpoints every
// interval, until ctx ends; then it checkpoints what it has and closes the
// writer. An error of mapRecord, of a write or of a commit aborts the open
// transaction, closes the writer and is returned.
func (w *Writer) Run(ctx context.Context, every time.Duration, mapRecord func(r *kgo.Record, send func(key, value []byte)) error) error {
	next := time.Now().Add(every)
	for ctx.Err() == nil {
		pctx, cancel := context.WithDeadline(ctx, next)
		recs, err := w.Poll(pctx)
		cancel()
		if err != nil {
			return errors.Join(err, w.Close(context.WithoutCancel(ctx)))
		}
		for _, r := range recs {
			if err := mapRecord(r, w.Send); err != nil {
				return errors.Join(fmt.Errorf("repartition writer: %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err),
					w.Close(context.WithoutCancel(ctx)))
			}
		}
		if !time.Now().Before(next) {
			if _, err := w.Checkpoint(ctx); err != nil {
				return errors.Join(err, w.Close(context.WithoutCancel(ctx)))
			}
			next = time.Now().Add(every)
		}
	}
	// Stopped: commit what was polled and sent, then leave.
	end, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := w.Checkpoint(end); err != nil {
		return errors.Join(err, w.Close(end))
	}
	return w.Close(end)
}
