package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tailOptions say what changelog tail prints.
type tailOptions struct {
	n         int  // the latest n records of the topic
	fromStart bool // every record instead
	follow    bool // then the new ones until ctx is done
}

// tailChangelog prints records of topic (read_committed) as JSON lines:
// partition, offset, timestamp, key, value and headers. It prints the
// latest o.n records of the whole topic, or with o.fromStart all of them,
// and with o.follow goes on with the records that come until ctx is done.
func tailChangelog(ctx context.Context, w io.Writer, brokers []string, topic string, o tailOptions) error {
	conn := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	starts, ends, err := topicOffsets(ctx, conn, strings.Join(brokers, ","), topic)
	if err != nil {
		return err
	}
	emit := func(r *kgo.Record) error { return printRecord(w, r) }
	switch {
	case o.fromStart:
		err = readPartitions(ctx, conn, topic, starts, ends, emit)
	case o.n > 0:
		var recs []*kgo.Record
		if recs, err = latest(ctx, conn, topic, starts, ends, o.n); err == nil {
			for _, r := range recs {
				if err = emit(r); err != nil {
					break
				}
			}
		}
	}
	if err != nil || !o.follow {
		return err
	}
	return readPartitions(ctx, conn, topic, ends, nil, emit)
}

// topicOffsets returns the start and the last stable offset of every
// partition of topic, on the cluster that conn reaches (named cluster in
// messages).
func topicOffsets(ctx context.Context, conn []kgo.Opt, cluster, topic string) (starts, ends map[int32]int64, err error) {
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	list := func(l func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[int32]int64, error) {
		listed, err := l(ctx, topic)
		if err == nil {
			err = listed.Error()
		}
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, fmt.Errorf("topic %q does not exist on %s", topic, cluster)
		}
		if err != nil {
			return nil, fmt.Errorf("list the offsets of topic %q: %w", topic, err)
		}
		m := map[int32]int64{}
		listed.Each(func(o kadm.ListedOffset) { m[o.Partition] = o.Offset })
		return m, nil
	}
	if starts, err = list(adm.ListStartOffsets); err != nil {
		return nil, nil, err
	}
	ends, err = list(adm.ListCommittedOffsets)
	return starts, ends, err
}

// readPartitions reads topic (read_committed, unless conn, the connection's
// options, says otherwise) from the offset of each
// partition in from up to its offset in until, or on until ctx is done when
// until is nil, and calls fn with each record, in order per partition.
// until must not pass a partition's last stable offset. A partition is done
// on a record at or past its until-1: the offset before until may be an
// aborted record, which read_committed skips, but the last stable offset
// follows a record or a transaction marker, which the reader keeps for
// that.
func readPartitions(ctx context.Context, conn []kgo.Opt, topic string, from, until map[int32]int64, fn func(*kgo.Record) error) error {
	offsets := map[int32]kgo.Offset{}
	for p, o := range from {
		if until == nil || o < until[p] {
			offsets[p] = kgo.NewOffset().At(o)
		}
	}
	if until != nil && len(offsets) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, conn...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for until == nil || len(offsets) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil // interrupted
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return fmt.Errorf("read %s/%d: %w", topic, errs[0].Partition, errs[0].Err)
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if until != nil {
				if _, reading := offsets[r.Partition]; !reading {
					continue
				}
				if r.Offset >= until[r.Partition]-1 {
					delete(offsets, r.Partition)
				}
				if r.Offset >= until[r.Partition] {
					continue
				}
			}
			if !r.Attrs.IsControl() {
				if err := fn(r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// latest returns the n latest records of topic, oldest first: the last n
// of each partition (read backwards in doubling windows, as transaction
// markers and aborted records take offsets too), merged by timestamp.
func latest(ctx context.Context, conn []kgo.Opt, topic string, starts, ends map[int32]int64, n int) ([]*kgo.Record, error) {
	parts := map[int32][]*kgo.Record{}
	from, until := map[int32]int64{}, map[int32]int64{}
	for p, end := range ends {
		if end > starts[p] {
			from[p], until[p] = max(starts[p], end-int64(n)), end
		}
	}
	for len(from) > 0 {
		got := map[int32][]*kgo.Record{}
		if err := readPartitions(ctx, conn, topic, from, until, func(r *kgo.Record) error {
			got[r.Partition] = append(got[r.Partition], r)
			return nil
		}); err != nil || ctx.Err() != nil {
			return nil, err
		}
		for p := range from {
			rs := append(got[p], parts[p]...)
			parts[p] = rs[max(0, len(rs)-n):]
			if len(rs) >= n || from[p] == starts[p] {
				delete(from, p)
				continue
			}
			from[p], until[p] = max(starts[p], from[p]-2*(until[p]-from[p])), from[p]
		}
	}
	return newest(parts, n), nil
}

// newest picks the n newest records of partitions' records (each in offset
// order), keeping each partition's order: the later timestamp first, the
// higher partition among equal ones. It returns them oldest first.
func newest(parts map[int32][]*kgo.Record, n int) []*kgo.Record {
	var out []*kgo.Record
	for len(out) < n {
		var pick *kgo.Record
		for _, rs := range parts {
			if len(rs) == 0 {
				continue
			}
			r := rs[len(rs)-1]
			if pick == nil || r.Timestamp.After(pick.Timestamp) || r.Timestamp.Equal(pick.Timestamp) && r.Partition > pick.Partition {
				pick = r
			}
		}
		if pick == nil {
			break
		}
		out = append(out, pick)
		parts[pick.Partition] = parts[pick.Partition][:len(parts[pick.Partition])-1]
	}
	slices.Reverse(out)
	return out
}

// printRecord writes a record as a JSON line, its headers by their names.
func printRecord(w io.Writer, r *kgo.Record) error {
	headers := map[string]string{}
	for _, h := range r.Headers {
		headers[h.Key] = string(h.Value)
	}
	b, err := json.Marshal(map[string]any{"partition": r.Partition, "offset": r.Offset,
		"timestamp": r.Timestamp.UTC().Format(time.RFC3339Nano), "key": raw(r.Key), "value": raw(r.Value), "headers": headers})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// raw keeps a JSON key or value as JSON, and anything else as a string.
func raw(b []byte) any {
	if b == nil {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return string(b)
}
