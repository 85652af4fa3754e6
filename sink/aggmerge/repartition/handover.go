package repartition

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// ErrHandover marks a partition that cannot be taken over by a table: its
// bucket holds rows that are not from the owner log.
var ErrHandover = errors.New("repartition: cannot take the partition over")

// rebuildBatch bounds the rows of one Apply of a rebuild.
const rebuildBatch = 32768

// OwnerConfig says who owns repartition partitions and where their owner
// log is.
type OwnerConfig struct {
	// Kafka is how the owner reaches the cluster.
	Kafka kafka.Connection
	// Topic is the repartition topic; its owner log is OwnerLogTopic(Topic).
	Topic string
	// Owner names this owner in its seals: "<job>/<table>#<instance>".
	Owner string
	// TransactionalID is the prefix of the owner log's transactional ids,
	// "<prefix>-<partition>" (Topic+"-owner" when empty). It must be the
	// same for every owner of a partition: it is what fences the previous
	// one.
	TransactionalID string
	// Clear makes every Take leave the bucket exactly as of the owner
	// log's last seal, whatever the table held: a bucket with changes past
	// the last seal of this table (committed by a stage 2 whose publisher
	// lagged), or with rows of an earlier ownership, is cleared and
	// rebuilt. Only safe when the table's writer has no undo pending (its
	// stage 2 restored, undid and stopped since), and when stage 2 then
	// reads the partition from the Handover's Resume, not from its own
	// checkpoint: dynamic ownership (Owners, docs/SCALING.md). Without it a
	// table of the last seal is kept as it is (stage 2 restores its
	// checkpoint), and a bucket holding other writes is refused.
	Clear bool
}

func (cfg OwnerConfig) transactionalID(p int32) string {
	prefix := cfg.TransactionalID
	if prefix == "" {
		prefix = cfg.Topic + "-owner"
	}
	return fmt.Sprintf("%s-%d", prefix, p)
}

// rebuildWriter is the writer id of a rebuild's (and a clear's) writes to
// a table. It holds no '#': an id "<job>/<sink>#…" would be of the group
// of stage 2's writer (base.GroupOf), whose undo would then take the
// rebuilt rows back.
func (cfg OwnerConfig) rebuildWriter() string {
	return strings.ReplaceAll(cfg.Owner, "#", "@") + "/rebuild"
}

// Handover is a partition taken over by Take: its owner-log producer (which
// fenced the previous owner), the claimed epoch, and where stage 2 and the
// Publisher go on.
type Handover struct {
	cfg       OwnerConfig
	Partition int32
	// Epoch is the ownership epoch claimed.
	Epoch uint64
	// Resume is the repartition offset at which stage 2 starts reading the
	// partition on a fresh start.
	Resume int64
	// Read is the count of owner-log records read and Rebuilt the rows
	// written to the table (0 when the table still held the bucket).
	Read, Rebuilt int
	// From is the bucket's log offset from which the Publisher publishes.
	From uint64
	cl   *kgo.Client
	last int64 // owner-log offset of the claim
}

// Close closes the partition's owner-log producer.
func (h *Handover) Close() { h.cl.Close() }

// Take takes repartition partition p over for table (docs/SCALING.md, "the
// handover"): it fences the previous owner by the partition's
// transactional id, reads the owner log of p to its end checking the chain
// of seals (ErrTwoOwners), rebuilds p's bucket in table from it (unless
// table still holds it: the last seal is its own), claims a new epoch in
// the owner log, and returns where stage 2 resumes. The table must have as
// many buckets as the repartition topic has partitions.
func Take(ctx context.Context, cfg OwnerConfig, table *aggmerge.Table, p int32) (*Handover, error) {
	h, err := take(ctx, cfg, table, p)
	if err != nil {
		return nil, fmt.Errorf("take %s partition %d for %s: %w", cfg.Topic, p, cfg.Owner, err)
	}
	return h, nil
}

func take(ctx context.Context, cfg OwnerConfig, table *aggmerge.Table, p int32) (*Handover, error) {
	if cfg.Topic == "" || cfg.Owner == "" {
		return nil, errors.New("OwnerConfig.Topic and Owner are required")
	}
	buckets := table.Schema().Buckets
	if p < 0 || int(p) >= buckets {
		return nil, fmt.Errorf("partition %d of a table of %d buckets", p, buckets)
	}
	conn, err := cfg.Kafka.Options()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(conn, kgo.TransactionalID(cfg.transactionalID(p)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return nil, err
	}
	// Failover moves buckets one by one: partition p must be bucket p.
	topic := OwnerLogTopic(cfg.Topic)
	for _, t := range []string{cfg.Topic, topic} {
		if err := ensureTopic(ctx, kadm.NewClient(cl), t, buckets); err != nil {
			cl.Close()
			return nil, err
		}
	}
	h := &Handover{cfg: cfg, Partition: p, cl: cl}
	if err := h.take(ctx, conn, topic, table); err != nil {
		cl.Close()
		return nil, err
	}
	return h, nil
}

func (h *Handover) take(ctx context.Context, conn []kgo.Opt, topic string, table *aggmerge.Table) error {
	// 1. Fence: loading the producer id bumps its epoch, aborts the
	// previous owner's open transaction and refuses its later commits.
	if _, _, err := h.cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("fence the previous owner: %w", err)
	}
	// 2. Read the owner log to its end, checking the chain.
	read, err := readImages(ctx, conn, topic, []int32{h.Partition}, table.Schema())
	if err != nil {
		return err
	}
	chain, images := read[h.Partition].chain, read[h.Partition].images
	h.Read = read[h.Partition].records
	last := chain.seal
	if chain.last < 0 {
		last.Resume = 0 // nobody owned it: the partition from its start
	}
	// 3. Rebuild, unless the table still holds the bucket.
	kept := chain.last >= 0 && last.Table == table.ID()
	if kept && h.cfg.Clear {
		if kept, err = changedSince(table, int(h.Partition), last.LogTo); err != nil {
			return err
		}
		kept = !kept
	}
	if kept {
		_, end, err := table.LogOffsets(int(h.Partition))
		if err != nil {
			return err
		}
		if end < last.LogTo {
			return fmt.Errorf("%w: bucket %d of %s ends at log offset %d, before %d of the last seal of this table",
				ErrHandover, h.Partition, table.Dir(), end, last.LogTo)
		}
		h.From = last.LogTo
	} else {
		if h.From, err = h.rebuild(table, images); err != nil {
			return err
		}
	}
	// 4. Claim the next epoch, based on the last seal.
	h.Epoch, h.Resume = last.Epoch+1, last.Resume
	claim := Seal{Owner: h.cfg.Owner, Epoch: h.Epoch, Claim: true, BasedOn: chain.last, Resume: h.Resume, Table: table.ID(), LogTo: h.From}
	off, err := h.commit(ctx, nil, nil, claim)
	if err != nil {
		return fmt.Errorf("claim epoch %d: %w", h.Epoch, err)
	}
	h.last = off
	return nil
}

// partitionImages is what an owner-log partition holds: its chain of
// seals, checked, and the last image of each key (nil: a tombstone).
type partitionImages struct {
	chain   ownerChain
	images  map[string][]agg.Value
	records int
}

// maxImagesHint caps the keys readImages makes room for before reading.
const maxImagesHint = 1 << 18

// readImages reads partitions of an owner log to their end, checking each
// chain (ErrTwoOwners), keeping the last image of each key.
func readImages(ctx context.Context, conn []kgo.Opt, topic string, partitions []int32, schema aggmerge.Schema) (map[int32]*partitionImages, error) {
	out := make(map[int32]*partitionImages, len(partitions))
	for _, p := range partitions {
		out[p] = &partitionImages{chain: newOwnerChain(p), images: map[string][]agg.Value{}}
	}
	var slab []agg.Value // the images' values, allocated in chunks
	columns, buckets := len(schema.Values), schema.Buckets
	var rec ownerRecord
	// A map made for its keys grows without rehashing them all at each
	// doubling: that was a tenth of a rebuild's CPU. The log's length
	// bounds the keys; a long log of few keys must not cost memory.
	sized := func(p int32, end int64) {
		out[p].images = make(map[string][]agg.Value, min(end, maxImagesHint))
	}
	err := readOwnerLog(ctx, conn, topic, partitions, sized, func(r *kgo.Record) error {
		pi := out[r.Partition]
		pi.records++
		if err := decodeOwner(r.Value, columns, &rec); err != nil {
			return fmt.Errorf("%s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		if err := pi.chain.add(r.Offset, &rec); err != nil {
			return err
		}
		if rec.seal != nil {
			return nil
		}
		if b := base.BucketOf(r.Key, buckets); b != int(r.Partition) {
			return fmt.Errorf("%w: %s/%d@%d: a row of bucket %d", ErrOwnerLog, r.Topic, r.Partition, r.Offset, b)
		}
		if rec.vals == nil {
			pi.images[string(r.Key)] = nil
			return nil
		}
		if len(slab)+columns > cap(slab) {
			slab = make([]agg.Value, 0, 1024*columns)
		}
		slab = append(slab, rec.vals...)
		pi.images[string(r.Key)] = slab[len(slab)-columns : len(slab) : len(slab)]
		return nil
	})
	return out, err
}

// ReadAll writes into table, which must be empty, every bucket of a
// repartition topic's owner log as of its last seal: the whole table of a
// scaled job with dynamic ownership, every bucket as its owner last
// published it (table scan --all). It checks every partition's chain
// (ErrTwoOwners) and returns the rows written. The table's schema is the
// scaled job's.
func ReadAll(ctx context.Context, conn kafka.Connection, repartitionTopic string, table *aggmerge.Table) (int, error) {
	opts, err := conn.Options()
	if err != nil {
		return 0, fmt.Errorf("read owner log: %w", err)
	}
	buckets := table.Schema().Buckets
	ps := make([]int32, buckets)
	for p := range ps {
		ps[p] = int32(p)
	}
	read, err := readImages(ctx, opts, OwnerLogTopic(repartitionTopic), ps, table.Schema())
	if err != nil {
		return 0, fmt.Errorf("read owner log of %s: %w", repartitionTopic, err)
	}
	rows := 0
	for _, p := range ps {
		h := &Handover{cfg: OwnerConfig{Owner: "read-all"}, Partition: p}
		if _, err := h.rebuild(table, read[p].images); err != nil {
			return 0, fmt.Errorf("read owner log of %s: %w", repartitionTopic, err)
		}
		rows += h.Rebuilt
	}
	return rows, nil
}

// rebuild writes the images into the partition's bucket of table, which
// must hold no rows but those of an earlier rebuild that was never claimed
// (a crash between rebuild and claim); it returns the log end after it.
// Those rows are cleared first; then the bucket is empty and the images
// are bulk-loaded (Table.Load: no old-row lookups, no row cache).
func (h *Handover) rebuild(table *aggmerge.Table, images map[string][]agg.Value) (uint64, error) {
	bucket := int(h.Partition)
	start, end, err := table.LogOffsets(bucket)
	if err != nil {
		return 0, err
	}
	rebuilder := h.cfg.rebuildWriter()
	if !h.cfg.Clear {
		err = table.ReadLogWith(bucket, start, aggmerge.LogRead{Reuse: true}, func(e *aggmerge.Entry) error {
			if e.Writer.ID != rebuilder {
				return fmt.Errorf("%w: bucket %d of %s holds writes of %s (log offset %d): the table applied the partition before, "+
					"under another owner's seals; take it over with a new table", ErrHandover, bucket, table.Dir(), e.Writer.ID, e.Offset)
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	b, err := table.NewBatch(aggmerge.Writer{ID: rebuilder}, nil)
	if err != nil {
		return 0, err
	}
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		_, err := table.Apply(b)
		b.Reset()
		return err
	}
	if end > start {
		// An unclaimed rebuild (or, with Clear, any earlier state): its
		// rows go, the images come back.
		if _, err := clearBucket(table, b, bucket, flush); err != nil {
			return 0, err
		}
	}
	rows := make([]aggmerge.LoadRow, 0, len(images))
	for key, vals := range images {
		if vals != nil {
			rows = append(rows, aggmerge.LoadRow{Key: key, Vals: vals})
		}
	}
	if h.Rebuilt, err = table.Load(aggmerge.Writer{ID: rebuilder}, bucket, rows); err != nil {
		return 0, fmt.Errorf("rebuild: %w", err)
	}
	if err := table.Sync(); err != nil {
		return 0, err
	}
	_, end, err = table.LogOffsets(bucket)
	return end, err
}

// clearBucket deletes every row of bucket with b, applying it with flush
// every rebuildBatch rows, and returns how many it deleted.
func clearBucket(table *aggmerge.Table, b *aggmerge.Batch, bucket int, flush func() error) (int, error) {
	n := 0
	err := table.ScanBucket(bucket, func(key []byte, _ aggmerge.Row) error {
		n++
		if err := b.DeleteEncoded(aggmerge.Overwrite, append([]byte(nil), key...)); err != nil {
			return err
		}
		if b.Len() >= rebuildBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return 0, fmt.Errorf("clear bucket %d: %w", bucket, err)
	}
	return n, nil
}

// changedSince reports whether the bucket's log holds a change of a row (an
// entry that is not a marker) at or past offset from, or may have held one
// (its log was truncated past from).
func changedSince(table *aggmerge.Table, bucket int, from uint64) (bool, error) {
	start, _, err := table.LogOffsets(bucket)
	if err != nil || from < start {
		return true, err
	}
	changed := false
	err = table.ReadLogWith(bucket, from, aggmerge.LogRead{Reuse: true}, func(e *aggmerge.Entry) error {
		if e.Op != aggmerge.MarkerEntry {
			changed = true
			return errStopRead
		}
		return nil
	})
	if errors.Is(err, errStopRead) {
		err = nil
	}
	return changed, err
}

var errStopRead = errors.New("stop reading")

// commit writes rows and then seal to the owner log, and changes (records
// of the changelog topic's partition of the bucket, nil: none), in one
// transaction and returns the seal's offset.
func (h *Handover) commit(ctx context.Context, rows, changes []*kgo.Record, seal Seal) (int64, error) {
	if err := h.cl.BeginTransaction(); err != nil {
		return 0, err
	}
	var (
		mu       sync.Mutex
		produced error
		off      int64
	)
	done := func(r *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil && produced == nil {
			produced = err
		}
		if r.Key == nil { // the seal: every other record has a key
			off = r.Offset
		}
	}
	topic := OwnerLogTopic(h.cfg.Topic)
	for _, r := range rows {
		r.Topic, r.Partition = topic, h.Partition
		h.cl.Produce(ctx, r, done)
	}
	for _, r := range changes {
		h.cl.Produce(ctx, r, done)
	}
	h.cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: h.Partition, Value: appendSeal(nil, seal)}, done)
	flushed := h.cl.Flush(ctx)
	mu.Lock()
	err := errors.Join(produced, flushed)
	mu.Unlock()
	try := kgo.TryCommit
	if err != nil {
		try = kgo.TryAbort
	}
	if end := h.cl.EndTransaction(ctx, try); end != nil {
		return 0, h.fenced(errors.Join(err, end))
	}
	if err != nil {
		return 0, h.fenced(err)
	}
	return off, nil
}

// fenced explains an error of an owner that a newer owner of its partition
// fenced.
func (h *Handover) fenced(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return fmt.Errorf("fenced: a newer owner took partition %d (transactional id %q), so %s stops applying it: %w",
			h.Partition, h.cfg.transactionalID(h.Partition), h.cfg.Owner, err)
	}
	return err
}
