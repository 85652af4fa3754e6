package export

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// ReaderConfig configures Read and ReadTable.
type ReaderConfig struct {
	// Kafka is the connection to the cluster of the topic.
	Kafka kafka.Connection
	// Topic is the changelog topic.
	Topic string
	// Format is the topic's format (UpsertJSON).
	Format Format
	// Follow keeps reading after the end (until ctx is done) instead of
	// returning there.
	Follow bool
	// Until, if set, reads each partition (index = partition) up to this
	// offset, exclusive, instead of its end: a version's EndOffsets, to
	// read the table as of that version. The records before it must all
	// be retained: a partition whose log start is past 0 is
	// ErrPastRetention, one whose end is below it an error. One whose
	// records reach it but whose stable end is below it (a transaction not
	// decided yet for a read_committed reader) is waited for, until ctx is
	// done: a version is visible in its versions topic once its
	// transaction committed, and Kafka writes the commit markers to the
	// changelog's partitions one at a time, so a reader may see the
	// version a moment before its records. Not with Follow.
	Until []int64
}

// ErrPastRetention marks a read of a table as of a version whose records
// (in the changelog topic, or in the table's log) are no longer retained.
var ErrPastRetention = errors.New("export: past the retention")

// Change is one change read from a changelog topic.
type Change struct {
	Kind runtime.RowKind // +I, -U, +U or -D
	Key  kafka.Row       // the primary key
	// Row is the row after the change for +I and +U, before it for -U and
	// -D. It shares memory with other rows: Clone it to keep it for long.
	Row        kafka.Row
	RawKey     []byte // the record key as written: the primary key's JSON
	Bucket     int    // the partition
	LogOffset  uint64 // the ebbflow.log_offset header
	Checkpoint uint64 // the ebbflow.checkpoint header
	Undo       bool   // the ebbflow.undo header
}

// Read reads a changelog topic with read_committed isolation, from the
// start of every partition up to its end as of the call (or on, with
// Follow), and calls fn with each change in order per partition; an error
// from fn stops the read and is returned. Upsert records go through a
// kafka.Normalizer, so an update gives -U then +U and a delete gives -D
// with the old row, whatever the format. This is the documented way to
// consume the changelog from Go.
func Read(ctx context.Context, cfg ReaderConfig, fn func(Change) error) error {
	if cfg.Format == "" {
		cfg.Format = UpsertJSON
	}
	codec, err := cfg.Format.codec()
	if err != nil {
		return fmt.Errorf("read changelog %q: %w", cfg.Topic, err)
	}
	conn, err := cfg.Kafka.Options()
	if err != nil {
		return fmt.Errorf("read changelog %q: %w", cfg.Topic, err)
	}
	if cfg.Follow && cfg.Until != nil {
		return fmt.Errorf("read changelog %q: Until and Follow together", cfg.Topic)
	}
	var ends map[int32]int64
	if cfg.Until != nil {
		ends, err = untilEnds(ctx, conn, cfg.Topic, cfg.Until)
	} else {
		ends, err = stableEnds(ctx, conn, cfg.Topic)
	}
	if err != nil {
		return err
	}
	from := map[int32]kgo.Offset{}
	open := 0
	for p, end := range ends {
		from[p] = kgo.NewOffset().AtStart()
		if end > 0 {
			open++
		}
	}
	cl, err := kgo.NewClient(append(conn,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // to see that a partition's end is reached
	)...)
	if err != nil {
		return fmt.Errorf("read changelog %q: %w", cfg.Topic, err)
	}
	defer cl.Close()
	dec := codec.Decoder()()
	var norm kafka.Normalizer
	for cfg.Follow || open > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			if cfg.Follow {
				return nil
			}
			return fmt.Errorf("read changelog %q: %w", cfg.Topic, err)
		}
		for _, fe := range fs.Errors() {
			return fmt.Errorf("read changelog %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			if ferr != nil {
				return
			}
			end, reading := ends[r.Partition]
			if !reading || (cfg.Until != nil && r.Offset >= end) {
				return // past Until: of a later version
			}
			if end > 0 && r.Offset >= end-1 {
				ends[r.Partition] = 0
				open--
			}
			if r.Attrs.IsControl() {
				return
			}
			ferr = emit(r, dec, &norm, fn)
		})
		if ferr != nil {
			return ferr
		}
	}
	return nil
}

// emit decodes one record and calls fn with its rows.
func emit(r *kgo.Record, dec kafka.Decoder[kafka.Change], norm *kafka.Normalizer, fn func(Change) error) error {
	c, err := dec(r)
	if err != nil {
		return fmt.Errorf("read changelog %s/%d at %d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	c, ok := norm.Normalize(c)
	if !ok {
		return nil
	}
	out := Change{Key: c.Key, RawKey: c.RawKey, Bucket: int(r.Partition)}
	out.LogOffset, _ = uintHeader(r, HeaderOffset)
	out.Checkpoint, _ = uintHeader(r, HeaderCheckpoint)
	out.Undo, _ = strconv.ParseBool(string(header(r, HeaderUndo)))
	return c.Rows(func(k runtime.RowKind, row kafka.Row) error {
		out.Kind, out.Row = k, row
		return fn(out)
	})
}

// stableEnds returns the last stable offset of every partition.
func stableEnds(ctx context.Context, conn []kgo.Opt, topic string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return nil, fmt.Errorf("read changelog %q: %w", topic, err)
	}
	defer cl.Close()
	lso, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("read changelog %q: list end offsets: %w", topic, err)
	}
	ends := map[int32]int64{}
	lso.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return ends, nil
}

// untilPoll is how often untilEnds looks whether the transactions before
// the offsets to read to are decided.
const untilPoll = 10 * time.Millisecond

// untilEnds checks that until (per partition) is within what the topic
// retains, waits until every record before it is decided for a
// read_committed reader (its stable end at or past it), and returns it as
// the ends to read to.
func untilEnds(ctx context.Context, conn []kgo.Opt, topic string, until []int64) (map[int32]int64, error) {
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return nil, fmt.Errorf("read changelog %q: %w", topic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("read changelog %q: list start offsets: %w", topic, err)
	}
	hws, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = hws.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("read changelog %q: list end offsets: %w", topic, err)
	}
	out := map[int32]int64{}
	for i, u := range until {
		p := int32(i)
		end, ok := hws.Lookup(topic, p)
		if !ok || end.Offset < u {
			return nil, fmt.Errorf("read changelog %q: partition %d ends at offset %d, before the offset %d to read to (the topic was recreated?)", topic, p, end.Offset, u)
		}
		if s, ok := starts.Lookup(topic, p); ok && s.Offset > 0 && u > 0 {
			return nil, fmt.Errorf("read changelog %q: %w: partition %d starts at offset %d, its records before it are deleted, so the table cannot be rebuilt up to offset %d",
				topic, ErrPastRetention, p, s.Offset, u)
		}
		out[p] = u
	}
	for {
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("read changelog %q: list stable offsets: %w", topic, err)
		}
		behind, stable := -1, int64(0)
		for i, u := range until {
			if o, _ := lso.Lookup(topic, int32(i)); o.Offset < u {
				behind, stable = i, o.Offset
				break
			}
		}
		if behind < 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read changelog %q: partition %d: the records before offset %d are in a transaction not decided yet (stable end %d): %w",
				topic, behind, until[behind], stable, ctx.Err())
		case <-time.After(untilPoll):
		}
	}
}

// ReadTable reads a changelog topic up to its end (see Read) and returns
// the table it describes: the record key (the primary key's JSON as
// written) → the row.
func ReadTable(ctx context.Context, cfg ReaderConfig) (map[string]kafka.Row, error) {
	cfg.Follow = false
	rows := map[string]kafka.Row{}
	err := Read(ctx, cfg, func(c Change) error {
		switch c.Kind {
		case runtime.RowInsert, runtime.RowUpdateAfter:
			rows[string(c.RawKey)] = c.Row.Clone()
		case runtime.RowDelete:
			delete(rows, string(c.RawKey))
		}
		return nil
	})
	return rows, err
}
