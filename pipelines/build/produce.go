package build

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/pipelines"
)

// producer writes the records of a datagen source into its topic, record n
// (as JSON, key n in decimal) to partition n mod partitions. On start it
// reads the last record of every partition and goes on after it, so a
// restart neither repeats nor skips a record.
type producer struct {
	gen        *pipelines.Generator
	rows       *pipelines.RowBuilder
	spec       *pipelines.DatagenSource
	conn       kafka.Connection
	partitions int // when the topic must be created
	log        *slog.Logger
}

// stopped reports err unless ctx ended: a stop while starting is no error
// (the next run resumes from the topic).
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// resumeTimeout bounds reading the last records of the topic.
const resumeTimeout = 30 * time.Second

func (p *producer) run(ctx context.Context) error {
	conn, err := p.conn.Options()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(conn, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return fmt.Errorf("new producer: %w", err)
	}
	defer func() {
		settle(cl)
		cl.Close()
	}()
	parts, err := p.ensureTopic(ctx, kadm.NewClient(cl))
	if err != nil {
		return stopped(ctx, err)
	}
	next, err := p.resume(ctx, kadm.NewClient(cl), parts)
	if err != nil {
		return stopped(ctx, err)
	}
	n := next[0]
	for _, x := range next {
		n = min(n, x)
	}
	p.log.Info("datagen producing", "from", n, "partitions", parts, "rate", p.spec.Rate, "count", p.spec.Count)

	var mu struct {
		sync.Mutex
		err error
	}
	start, made := time.Now(), int64(0)
	var buf []byte
	for p.spec.Count == 0 || n < p.spec.Count {
		if ctx.Err() != nil {
			return nil
		}
		mu.Lock()
		err := mu.err
		mu.Unlock()
		if err != nil {
			return err
		}
		if p.spec.Rate > 0 && float64(made) >= time.Since(start).Seconds()*p.spec.Rate {
			time.Sleep(min(time.Duration(float64(time.Second)/p.spec.Rate), 20*time.Millisecond))
			continue
		}
		part := int32(n % int64(parts))
		if n >= next[part] {
			buf = p.rows.AppendJSON(buf[:0], p.gen.Row(n))
			rec := &kgo.Record{Topic: p.spec.Topic, Partition: part, Key: strconv.AppendInt(nil, n, 10), Value: append([]byte(nil), buf...)}
			cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
				if err != nil && !errors.Is(err, context.Canceled) {
					mu.Lock()
					if mu.err == nil {
						mu.err = fmt.Errorf("produce record %s: %w", r.Key, err)
					}
					mu.Unlock()
				}
			})
			made++
		}
		n++
	}
	if err := cl.Flush(ctx); err != nil {
		return nil // cancelled
	}
	mu.Lock()
	defer mu.Unlock()
	if mu.err == nil {
		p.log.Info("datagen finished", "records", p.spec.Count)
	}
	return mu.err
}

// settle waits until no record of cl is in flight: each is written and
// acknowledged, or failed because the run's context ended before it was
// sent. A stopped run must not leave a produce request that the broker
// applies after the next run's resume read the end offsets: that run would
// write the record again.
func settle(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), resumeTimeout)
	defer cancel()
	_ = cl.Flush(ctx) // past the timeout the broker is gone; the next resume reads what it holds
}

// createTopic makes sure the topic exists.
func (p *producer) createTopic(ctx context.Context) error {
	conn, err := p.conn.Options()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(conn...)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = p.ensureTopic(ctx, kadm.NewClient(cl))
	return err
}

// ensureTopic creates the topic when absent, with one partition per
// subtask, and returns its partition count.
func (p *producer) ensureTopic(ctx context.Context, adm *kadm.Client) (int, error) {
	return kafka.EnsureTopic(ctx, adm, p.spec.Topic, int32(p.partitions))
}

// resume returns, per partition, the next record number to write there.
func (p *producer) resume(ctx context.Context, adm *kadm.Client, parts int) ([]int64, error) {
	topic := p.spec.Topic
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %q: %w", topic, err)
	}
	next := make([]int64, parts)
	from := map[int32]kgo.Offset{}
	for i := range next {
		next[i] = int64(i)
		if o, ok := ends.Lookup(topic, int32(i)); ok && o.Err == nil && o.Offset > 0 {
			from[int32(i)] = kgo.NewOffset().At(o.Offset - 1)
		}
	}
	if len(from) == 0 {
		return next, nil
	}
	conn, err := p.conn.Options()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(conn, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, resumeTimeout)
	defer cancel()
	for len(from) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read the last records of %q: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("read the last records of %q: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if _, want := from[r.Partition]; !want {
				return
			}
			delete(from, r.Partition)
			n, perr := strconv.ParseInt(string(r.Key), 10, 64)
			switch {
			case perr != nil || n%int64(parts) != int64(r.Partition):
				err = fmt.Errorf("topic %q partition %d: last record key %q is not a datagen record of this partition", topic, r.Partition, r.Key)
			default:
				next[r.Partition] = n + int64(parts)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return next, nil
}
