package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Errors that stop the exporter: retrying cannot help.
var (
	ErrPartitions = errors.New("export: changelog topic partition count differs from the table's bucket count")
	ErrGap        = errors.New("export: the table's log no longer holds entries the changelog has not received")
	ErrMismatch   = errors.New("export: the changelog topic belongs to another table")
	ErrFenced     = errors.New("export: fenced by another exporter with the same transactional id")
)

// ensureTopic creates topic with the given partitions (the changelog:
// one per bucket; the versions topic: one) and configuration, or checks
// the partition count of an existing one.
func (x *Exporter) ensureTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int, config map[string]*string) error {
	return EnsureTopic(ctx, adm, Topic{Name: topic, Partitions: partitions, Replication: x.cfg.Replication, Config: config, Table: x.cfg.Name}, x.log)
}

// Topic is a topic a table's changelog needs.
type Topic struct {
	Name        string
	Partitions  int
	Replication int16              // of a created topic (-1: the broker's default)
	Config      map[string]*string // of a created topic
	Table       string             // the table it is for, named in errors
}

// EnsureTopic creates the topic t when absent and waits until it can be
// used, or checks the partition count of an existing one (ErrPartitions).
func EnsureTopic(ctx context.Context, adm *kadm.Client, t Topic, log *slog.Logger) error {
	details, err := adm.ListTopics(ctx, t.Name)
	if err != nil {
		return fmt.Errorf("describe topic %q: %w", t.Name, err)
	}
	if d, ok := details[t.Name]; ok && d.Err == nil {
		if len(d.Partitions) != t.Partitions {
			return fmt.Errorf("%w: topic %q has %d partitions, table %q needs %d", ErrPartitions, t.Name, len(d.Partitions), t.Table, t.Partitions)
		}
		return nil
	}
	resp, err := adm.CreateTopic(ctx, int32(t.Partitions), t.Replication, t.Config, t.Name)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return EnsureTopic(ctx, adm, t, log) // created concurrently: check it
	}
	if err != nil {
		return fmt.Errorf("create topic %q with %d partitions: %w", t.Name, t.Partitions, err)
	}
	log.Info("topic created", "created", t.Name, "partitions", t.Partitions)
	return awaitTopic(ctx, adm, t.Name)
}

// topicReadyTimeout bounds the wait for a topic just created.
const topicReadyTimeout = 10 * time.Second

// awaitTopic waits, quietly, until the offsets of a topic just created can
// be listed: for a moment the broker (or the client's metadata cache) may
// not know it yet, which is no failure worth a warning. After
// topicReadyTimeout it gives up and lets the reads that follow report what
// is wrong.
func awaitTopic(ctx context.Context, adm *kadm.Client, topic string) error {
	deadline := time.Now().Add(topicReadyTimeout)
	for {
		ends, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lastExported is what the last committed record of a partition says.
type lastExported struct {
	found          bool
	offset, resume uint64 // log offset and restart point of the record
	kafkaOffset    int64  // the record's offset in the partition
	table, tableID string
	txnID          string // the writer's transactional id ("" before it was a header)
}

// checkOwner refuses a topic whose last committed records are of another
// table (another name, or another table of the same name: another data
// directory's, or this one recreated), naming both, before this exporter
// does anything a running owner would notice.
func (x *Exporter) checkOwner(last []lastExported) error {
	id := x.cfg.Table.ID().String()
	for p, l := range last {
		if !l.found || l.tableID == id {
			continue
		}
		owner := fmt.Sprintf("table %q (id %s", l.table, l.tableID)
		if l.txnID != "" {
			owner += fmt.Sprintf(", transactional id %q", l.txnID)
		}
		owner += ")"
		hint := "give each table its own changelog topic"
		if l.table == x.cfg.Name {
			hint = "a table of the same name from another data directory, or this table recreated: give each its own changelog topic"
		}
		return fmt.Errorf("%w: partition %d of %q holds changes of %s; this exporter writes table %q (id %s, transactional id %q): %s",
			ErrMismatch, p, x.cfg.Topic, owner, x.cfg.Name, id, x.cfg.TransactionalID, hint)
	}
	return nil
}

// closeFormer initialises each former transactional id once: that
// completes a commit in flight and aborts a transaction it left open, so
// its records are final before this exporter reads where it stands; then
// its hold on the log is released.
func (x *Exporter) closeFormer(ctx context.Context, conn []kgo.Opt) error {
	for len(x.former) > 0 {
		id := x.former[0]
		cl, err := kgo.NewClient(append(conn[:len(conn):len(conn)], kgo.TransactionalID(id))...)
		if err != nil {
			return fmt.Errorf("make producer of former transactional id %q: %w", id, err)
		}
		_, _, err = cl.ProducerID(ctx)
		cl.Close()
		if err != nil {
			return fmt.Errorf("init former transactional id %q: %w", id, err)
		}
		if err := x.cfg.Table.ReleaseHold(id); err != nil {
			return fmt.Errorf("release the log hold of former transactional id %q: %w", id, err)
		}
		x.log.Info("changelog export: closed the transactions of a former transactional id and released its log hold",
			"former", id, "transactional_id", x.cfg.TransactionalID)
		x.former = x.former[1:]
	}
	return nil
}

// readLast reads what the last committed record of every partition of
// the changelog says.
func (x *Exporter) readLast(ctx context.Context, adm *kadm.Client, opts []kgo.Opt) ([]lastExported, error) {
	recs, err := lastCommitted(ctx, adm, opts, x.cfg.Topic, x.owned)
	if err != nil {
		return nil, err
	}
	out := make([]lastExported, x.buckets)
	for p, r := range recs {
		if r == nil {
			continue
		}
		off, ok1 := uintHeader(r, HeaderOffset)
		res, ok2 := uintHeader(r, HeaderResume)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: record %d of %s/%d has no %s and %s headers", ErrMismatch, r.Offset, x.cfg.Topic, p, HeaderOffset, HeaderResume)
		}
		out[p] = lastExported{found: true, offset: off, resume: res, kafkaOffset: r.Offset, table: string(header(r, HeaderTable)),
			tableID: string(header(r, HeaderTableID)), txnID: string(header(r, HeaderTransactionalID))}
	}
	return out, nil
}

// lastCommitted finds the last committed record of each of the partitions
// of topic (absent where there is none), reading backwards in doubling
// windows: aborted records and transaction markers at the end of a
// partition are not records of it.
func lastCommitted(ctx context.Context, adm *kadm.Client, opts []kgo.Opt, topic string, partitions []int) (map[int]*kgo.Record, error) {
	ends, err := adm.ListCommittedOffsets(ctx, topic) // the last stable offsets
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list stable offsets of %q: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %q: %w", topic, err)
	}
	out := map[int]*kgo.Record{}
	type window struct{ from, until, start int64 }
	todo := map[int32]window{}
	for _, pi := range partitions {
		p := int32(pi)
		s, _ := starts.Lookup(topic, p)
		e, _ := ends.Lookup(topic, p)
		if e.Offset > s.Offset {
			todo[p] = window{from: max(s.Offset, e.Offset-64), until: e.Offset, start: s.Offset}
		}
	}
	for len(todo) > 0 {
		from := map[int32]kgo.Offset{}
		for p, w := range todo {
			from[p] = kgo.NewOffset().At(w.from)
		}
		last, err := readWindows(ctx, topic, opts, from, func(p int32) int64 { return todo[p].until })
		if err != nil {
			return nil, err
		}
		for p, w := range todo {
			r := last[p]
			if r == nil {
				if w.from == w.start {
					delete(todo, p) // nothing committed in the partition
					continue
				}
				todo[p] = window{from: max(w.start, w.from-2*(w.until-w.from)), until: w.from, start: w.start}
				continue
			}
			out[int(p)] = r
			delete(todo, p)
		}
	}
	return out, nil
}

// readWindows reads, read_committed, each partition from its offset until
// a record at or past until(p)-1 (a data record or a transaction marker),
// and returns the last data record below until(p), if any.
func readWindows(ctx context.Context, topic string, opts []kgo.Opt, from map[int32]kgo.Offset, until func(int32) int64) (map[int32]*kgo.Record, error) {
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return nil, fmt.Errorf("read the end of %q: %w", topic, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	last := map[int32]*kgo.Record{}
	open := len(from)
	reached := map[int32]bool{}
	for open > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read the end of %q: %w", topic, err)
		}
		for _, fe := range fs.Errors() {
			return nil, fmt.Errorf("read the end of %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			u := until(r.Partition)
			if reached[r.Partition] {
				return
			}
			if r.Offset < u && !r.Attrs.IsControl() {
				last[r.Partition] = r
			}
			if r.Offset >= u-1 {
				reached[r.Partition] = true
				open--
			}
		})
	}
	return last, nil
}

// cursors turns the last exported records into export positions, checked
// against the table's logs.
func (x *Exporter) cursors(last []lastExported) ([]*cursor, error) {
	cs := make([]*cursor, len(x.owned))
	id := x.cfg.Table.ID().String()
	for i, b := range x.owned {
		start, end, err := x.cfg.Table.LogOffsets(b)
		if err != nil {
			return nil, err
		}
		l := last[b]
		c := &cursor{bucket: b}
		switch {
		case !l.found:
			c.done, c.resume, c.held = start, start, start
			if start > 0 {
				x.log.Warn("changelog partition empty but the table's log starts later: exporting from the log start",
					"table", x.cfg.Name, "bucket", b, "log_start", start)
			}
		case l.tableID != id:
			return nil, fmt.Errorf("%w: partition %d of %q holds table id %s, table %q has id %s (recreated?)",
				ErrMismatch, b, x.cfg.Topic, l.tableID, x.cfg.Name, id)
		case l.offset >= end:
			return nil, fmt.Errorf("%w: partition %d of %q has log offset %d, table %q bucket %d ends at %d (recreated?)",
				ErrMismatch, b, x.cfg.Topic, l.offset, x.cfg.Name, b, end)
		case l.resume < start:
			return nil, fmt.Errorf("%w: table %q bucket %d: the exporter resumes at %d, the log starts at %d",
				ErrGap, x.cfg.Name, b, l.resume, start)
		default:
			c.done, c.resume, c.held = l.offset+1, l.resume, l.resume
		}
		cs[i] = c
	}
	return cs, nil
}
