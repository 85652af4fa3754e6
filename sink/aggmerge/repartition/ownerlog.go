package repartition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// The owner log (docs/SCALING.md, "Failover and rebalancing") holds, per
// repartition partition, what its owners committed: the images of the
// rows of the partition's bucket, each transaction ended by a Seal. Its
// records' values start with one of these bytes.
const (
	ownerRow       = 2 // key: encoded primary key; epoch, every value column
	ownerTombstone = 3 // key: encoded primary key; epoch: the row is gone
	ownerSeal      = 4 // no key; a Seal
)

// Owner-log errors.
var (
	// ErrOwnerLog marks an owner-log record that does not decode.
	ErrOwnerLog = errors.New("repartition: not an owner-log record")
	// ErrTwoOwners marks an owner log whose records show a partition
	// applied by two owners at once (a broken chain of seals or epochs).
	ErrTwoOwners = errors.New("repartition: partition applied by two owners at once")
)

// OwnerLogTopic is the owner log of a repartition topic.
func OwnerLogTopic(repartitionTopic string) string { return repartitionTopic + ".owners" }

// Seal ends each transaction of the owner log: the state it describes is
// the partition's rows as of the owner's stage-2 checkpoint Checkpoint,
// and stage 2 resumes the repartition partition at Resume from it.
type Seal struct {
	Owner string // "<job>/<table>#<instance>"
	Epoch uint64 // the ownership epoch, raised by each claim
	// Claim marks the seal of a handover: the first of its epoch, with no
	// rows.
	Claim bool
	// BasedOn is the owner-log offset of the seal before this one (-1:
	// none): what the owner had read when it wrote this one.
	BasedOn int64
	// Resume is the repartition offset of the next record to apply.
	Resume int64
	// Checkpoint is the owner's stage-2 checkpoint the seal commits (0 for
	// a claim).
	Checkpoint uint64
	// Table is the owner's table and LogTo its bucket's log end as of the
	// seal: where the owner's publisher goes on if it takes the partition
	// again with its table intact.
	Table uuid.UUID
	LogTo uint64
}

func appendSeal(dst []byte, s Seal) []byte {
	dst = append(dst, ownerSeal)
	dst = binary.AppendUvarint(dst, s.Epoch)
	dst = append(dst, boolByte(s.Claim))
	dst = binary.AppendVarint(dst, s.BasedOn)
	dst = binary.AppendVarint(dst, s.Resume)
	dst = binary.AppendUvarint(dst, s.Checkpoint)
	dst = append(dst, s.Table[:]...)
	dst = binary.AppendUvarint(dst, s.LogTo)
	return appendString(dst, s.Owner)
}

// appendImage appends the owner-log value of a row image (vals nil: a
// tombstone).
func appendImage(dst []byte, epoch uint64, vals []agg.Value) ([]byte, error) {
	if vals == nil {
		return binary.AppendUvarint(append(dst, ownerTombstone), epoch), nil
	}
	dst = binary.AppendUvarint(append(dst, ownerRow), epoch)
	return appendValues(dst, vals)
}

// ownerRecord is one decoded owner-log record.
type ownerRecord struct {
	seal  *Seal       // a seal, or nil
	epoch uint64      // a row's epoch
	vals  []agg.Value // a row's image; nil for a tombstone
}

// decodeOwner decodes an owner-log record value of a table with columns
// value columns into rec, reusing rec.vals.
func decodeOwner(value []byte, columns int, rec *ownerRecord) error {
	d := partialDecoder{b: value}
	kind := d.byte()
	rec.seal = nil
	switch kind {
	case ownerRow:
		rec.epoch = d.uvarint()
		rec.vals = d.values(rec.vals[:0], columns)
	case ownerTombstone:
		rec.epoch, rec.vals = d.uvarint(), nil
	case ownerSeal:
		s := &Seal{Epoch: d.uvarint()}
		switch c := d.byte(); c {
		case 0, 1:
			s.Claim = c == 1
		default:
			d.fail("claim %d", c)
		}
		s.BasedOn, s.Resume, s.Checkpoint = d.varint(), d.varint(), d.uvarint()
		if d.err == nil && len(d.b) < len(s.Table) {
			d.fail("truncated table id")
		}
		if d.err == nil {
			copy(s.Table[:], d.b)
			d.b = d.b[len(s.Table):]
		}
		s.LogTo = d.uvarint()
		s.Owner = d.string()
		rec.seal, rec.epoch = s, s.Epoch
	default:
		d.fail("kind %d", kind)
	}
	d.end()
	if d.err != nil {
		return fmt.Errorf("%w: %w", ErrOwnerLog, d.err)
	}
	return nil
}

// ownerChain checks one partition's owner log as it is read, in offset
// order: each seal is based on the seal before it, a claim raises the
// epoch, and every other record carries the epoch (and a seal the owner)
// of the last claim. A record that breaks it shows the partition applied
// by two owners at once (ErrTwoOwners).
type ownerChain struct {
	partition int32
	last      int64 // offset of the last seal, -1: none yet
	seal      Seal  // the last seal
	claimed   bool  // a claim was read: seal.Epoch and seal.Owner hold
}

func newOwnerChain(p int32) ownerChain { return ownerChain{partition: p, last: -1} }

func (c *ownerChain) add(offset int64, rec *ownerRecord) error {
	s := rec.seal
	switch {
	case s == nil && !c.claimed:
		return c.broken(offset, "a row of epoch %d before any claim", rec.epoch)
	case s == nil && rec.epoch != c.seal.Epoch:
		return c.broken(offset, "a row of epoch %d while %s holds epoch %d", rec.epoch, c.seal.Owner, c.seal.Epoch)
	case s == nil:
		return nil
	case s.BasedOn != c.last:
		return c.broken(offset, "a seal of %s (epoch %d) based on the seal at %d, but the last seal is at %d", s.Owner, s.Epoch, s.BasedOn, c.last)
	case s.Claim && c.claimed && s.Epoch <= c.seal.Epoch:
		return c.broken(offset, "a claim of %s at epoch %d, not above epoch %d of %s", s.Owner, s.Epoch, c.seal.Epoch, c.seal.Owner)
	case !s.Claim && !c.claimed:
		return c.broken(offset, "a seal of %s (epoch %d) before any claim", s.Owner, s.Epoch)
	case !s.Claim && (s.Epoch != c.seal.Epoch || s.Owner != c.seal.Owner):
		return c.broken(offset, "a seal of %s at epoch %d while %s holds epoch %d", s.Owner, s.Epoch, c.seal.Owner, c.seal.Epoch)
	}
	c.last, c.seal, c.claimed = offset, *s, true
	return nil
}

func (c *ownerChain) broken(offset int64, format string, args ...any) error {
	return fmt.Errorf("%w: partition %d at offset %d: %s", ErrTwoOwners, c.partition, offset, fmt.Sprintf(format, args...))
}

// readOwnerLog reads partitions of an owner log read_committed, from their
// start up to their stable end as of the call, and calls fn with each
// data record in offset order per partition. sized, if not nil, is told
// first each non-empty partition's stable end: at most that many records.
func readOwnerLog(ctx context.Context, conn []kgo.Opt, topic string, partitions []int32, sized func(p int32, end int64), fn func(*kgo.Record) error) error {
	cl, err := kgo.NewClient(append(conn,
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // to see that a partition's end is reached
		// A rebuild reads a partition whole: fewer, larger fetches.
		kgo.FetchMaxPartitionBytes(32<<20), kgo.FetchMaxBytes(64<<20),
	)...)
	if err != nil {
		return fmt.Errorf("read owner log %q: %w", topic, err)
	}
	defer cl.Close()
	lso, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		return fmt.Errorf("read owner log %q: list end offsets: %w", topic, err)
	}
	ends, from := map[int32]int64{}, map[int32]kgo.Offset{}
	for _, p := range partitions {
		o, ok := lso.Lookup(topic, p)
		if !ok {
			return fmt.Errorf("read owner log %q: no partition %d", topic, p)
		}
		if o.Offset > 0 {
			ends[p], from[p] = o.Offset, kgo.NewOffset().AtStart()
			if sized != nil {
				sized(p, o.Offset)
			}
		}
	}
	if len(ends) == 0 {
		return nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read owner log %q: %w", topic, err)
		}
		for _, fe := range fs.Errors() {
			return fmt.Errorf("read owner log %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			end, reading := ends[r.Partition]
			if ferr != nil || !reading || r.Offset >= end {
				return
			}
			if r.Offset >= end-1 {
				delete(ends, r.Partition)
			}
			if !r.Attrs.IsControl() {
				ferr = fn(r)
			}
		})
		if ferr != nil {
			return ferr
		}
	}
	return nil
}

// CheckOwners reads the whole owner log of a repartition topic and checks
// that no partition was applied by two owners at once (ErrTwoOwners,
// naming the partition, the offset and both owners): the chain of seals
// and epochs that every handover checks for its partition. columns is the
// table's value column count.
func CheckOwners(ctx context.Context, conn kafka.Connection, repartitionTopic string, partitions, columns int) error {
	opts, err := conn.Options()
	if err != nil {
		return fmt.Errorf("check owners: %w", err)
	}
	ps := make([]int32, partitions)
	chains := make([]ownerChain, partitions)
	for p := range ps {
		ps[p], chains[p] = int32(p), newOwnerChain(int32(p))
	}
	var rec ownerRecord
	return readOwnerLog(ctx, opts, OwnerLogTopic(repartitionTopic), ps, nil, func(r *kgo.Record) error {
		if err := decodeOwner(r.Value, columns, &rec); err != nil {
			return fmt.Errorf("check owners: %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		return chains[r.Partition].add(r.Offset, &rec)
	})
}
