package export

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
)

// upstreamSettle bounds how long Upstream waits for the open transactions
// of a versions topic to be decided (see versionsReader.catchUp).
const upstreamSettle = time.Second

// upstreamKept bounds the versions an Upstream keeps per topic: a job more
// than that many versions behind its upstream is told it consumed none.
const upstreamKept = 1000

// versionsReader reads a versions topic incrementally, read_committed.
type versionsReader struct {
	topic string
	cl    *kgo.Client
	adm   *kadm.Client
	added bool  // the partition is being consumed
	next  int64 // the offset after the last record read
	keep  int   // versions kept (0: all)
	list  []Version
}

func newVersionsReader(conn []kgo.Opt, topic string, keep int) (*versionsReader, error) {
	cl, err := kgo.NewClient(append(slices.Clip(conn),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // to see that the end is reached
	)...)
	if err != nil {
		return nil, fmt.Errorf("read versions %q: %w", topic, err)
	}
	return &versionsReader{topic: topic, cl: cl, adm: kadm.NewClient(cl), keep: keep}, nil
}

// catchUp reads the topic up to its last stable offset once every record
// written before the call is decided: Kafka makes a transaction visible in
// each partition on its own, so a job may see a transaction's changelog
// records before its version record, and must wait for the version. The
// wait is bounded by settle (0: by ctx only); past it catchUp reads what is
// decided, so a version whose transaction is still open can be missed, not
// invented. A topic that does not exist (yet), or that the principal may
// not describe, holds no versions.
func (r *versionsReader) catchUp(ctx context.Context, settle time.Duration) error {
	hws, err := r.adm.ListEndOffsets(ctx, r.topic)
	if err == nil {
		err = hws.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.TopicAuthorizationFailed) {
		// The client caches metadata (MetadataMinAge, 5s by default),
		// also a topic's absence: forget it, so that the next call sees
		// the topic once its first version created it.
		r.cl.PurgeTopicsFromClient(r.topic)
		return nil // no versions (yet), or none this principal may read
	}
	if err != nil {
		return fmt.Errorf("read versions %q: list end offsets: %w", r.topic, err)
	}
	hw, _ := hws.Lookup(r.topic, 0)
	deadline := time.Now().Add(settle)
	var end kadm.ListedOffset
	for {
		ends, err := r.adm.ListCommittedOffsets(ctx, r.topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return fmt.Errorf("read versions %q: list stable offsets: %w", r.topic, err)
		}
		end, _ = ends.Lookup(r.topic, 0)
		if end.Offset >= hw.Offset || (settle > 0 && time.Now().After(deadline)) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("read versions %q: %w", r.topic, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if end.Offset <= r.next {
		return nil
	}
	if !r.added {
		r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: {0: kgo.NewOffset().AtStart()}})
		r.added = true
	}
	for r.next < end.Offset {
		fs := r.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read versions %q: %w", r.topic, err)
		}
		for _, fe := range fs.Errors() {
			return fmt.Errorf("read versions %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		var derr error
		fs.EachRecord(func(rec *kgo.Record) {
			r.next = rec.Offset + 1
			if rec.Attrs.IsControl() || derr != nil {
				return
			}
			v, err := changelogfmt.DecodeVersion(rec)
			if err != nil {
				derr = fmt.Errorf("read versions %q: %w", r.topic, err)
				return
			}
			if n := len(r.list); n > 0 && v.Version <= r.list[n-1].Version {
				return
			}
			r.list = append(r.list, v)
			if r.keep > 0 && len(r.list) > r.keep {
				r.list = slices.Delete(r.list, 0, len(r.list)-r.keep)
			}
		})
		if derr != nil {
			return derr
		}
	}
	return nil
}

// ReadVersions reads a table's versions topic (see Config.VersionsTopic)
// up to its end as of the call (once the transactions open at the call are
// decided), read_committed, and returns the versions
// it holds, oldest first. Compaction keeps at least the newest
// Config.VersionsHistory of them; a reader that joins late gets those.
func ReadVersions(ctx context.Context, conn kafka.Connection, topic string) ([]Version, error) {
	opts, err := conn.Options()
	if err != nil {
		return nil, fmt.Errorf("read versions %q: %w", topic, err)
	}
	r, err := newVersionsReader(opts, topic, 0)
	if err != nil {
		return nil, err
	}
	defer r.cl.Close()
	if err := r.catchUp(ctx, 0); err != nil {
		return nil, err
	}
	return r.list, nil
}

// VersionsReaders reads versions topics again and again, each Read only
// what was appended since the previous one: for a process that looks at
// the versions of many tables repeatedly (the runner's topology and its
// metric). It keeps the newest keep versions of each topic (0: all). Reads
// take turns; Close ends its clients.
type VersionsReaders struct {
	opts []kgo.Opt
	keep int
	mu   struct {
		sync.Mutex
		readers map[string]*versionsReader
	}
}

// NewVersionsReaders reads the versions topics of conn's cluster.
func NewVersionsReaders(conn kafka.Connection, keep int) (*VersionsReaders, error) {
	opts, err := conn.Options()
	if err != nil {
		return nil, fmt.Errorf("versions readers: %w", err)
	}
	r := &VersionsReaders{opts: opts, keep: keep}
	r.mu.readers = map[string]*versionsReader{}
	return r, nil
}

// VersionsRead is what Read found in one versions topic: its versions,
// oldest first, or why it could not read them.
type VersionsRead struct {
	Versions []Version
	Err      error
}

// Read reads each topic (each named once) to its end as ReadVersions
// does, all at once, and returns what it found per topic, in the order
// given: a topic that does not exist holds no versions, one holding a
// record that is not a version is changelogfmt.ErrVersion.
func (r *VersionsReaders) Read(ctx context.Context, topics []string) []VersionsRead {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]VersionsRead, len(topics))
	readers := make([]*versionsReader, len(topics))
	for i, topic := range topics {
		if readers[i] = r.mu.readers[topic]; readers[i] == nil {
			if readers[i], out[i].Err = newVersionsReader(r.opts, topic, r.keep); out[i].Err == nil {
				r.mu.readers[topic] = readers[i]
			}
		}
	}
	_ = each(len(topics), func(i int) error {
		if out[i].Err == nil {
			if out[i].Err = readers[i].catchUp(ctx, 0); out[i].Err == nil {
				out[i].Versions = slices.Clone(readers[i].list)
			}
		}
		return nil
	})
	return out
}

// Close closes the clients of every topic read.
func (r *VersionsReaders) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for topic, vr := range r.mu.readers {
		vr.cl.Close()
		delete(r.mu.readers, topic)
	}
}

// Upstream tells, for a job whose sources read ebbflow changelogs, which
// upstream versions it had consumed completely at a checkpoint: per topic
// read, the newest version (in its versions topic, VersionsTopicOf) whose
// end offsets the source's positions at that checkpoint (kafka.Positions)
// are at or past in every partition. Its Consumed is an UpstreamFunc's
// work (Config.Upstream). Every topic read has an entry: version 0 while
// none is consumed completely (also for a topic without versions, not
// written by an ebbflow exporter; table and table id are empty while the
// topic has none), so that a version says which tables it reads from its
// first checkpoint on; its Exact says the job read nothing of it.
//
// A version is committed with the changelog records it ends at, so once
// the job has read those records, the version is in the versions topic:
// Consumed reads it to its end first (waiting up to a second for a
// transaction whose changelog records are visible before its version
// record), and so misses no version the positions cover unless the
// upstream exporter stalls in the middle of a commit; it never names a
// version they do not cover.
type Upstream struct {
	conn            []kgo.Opt
	positions       *kafka.Positions
	topics          []string
	versionsTopicOf func(string) string

	mu struct {
		sync.Mutex // one Consumed at a time
		readers    map[string]*versionsReader
		closed     bool
	}
}

// NewUpstream returns the Upstream of a source connected by conn whose
// positions are recorded in positions. topics are the topics it reads by
// name (kafka.Config.Topics): they have an entry from the first checkpoint
// on, also before the source was assigned their partitions; a topic found
// by pattern has one once it is. versionsTopicOf names the versions topic
// of each changelog topic (nil: changelogfmt.VersionsTopic).
func NewUpstream(conn kafka.Connection, positions *kafka.Positions, topics []string, versionsTopicOf func(string) string) (*Upstream, error) {
	opts, err := conn.Options()
	if err != nil {
		return nil, fmt.Errorf("upstream versions: %w", err)
	}
	if versionsTopicOf == nil {
		versionsTopicOf = changelogfmt.VersionsTopic
	}
	u := &Upstream{conn: opts, positions: positions, topics: slices.Clone(topics), versionsTopicOf: versionsTopicOf}
	u.mu.readers = map[string]*versionsReader{}
	return u, nil
}

// Consumed returns what the source had consumed at checkpoint: the
// upstream versions consumed completely, sorted by topic, each Exact when
// the positions are exactly at its end (Version.ExactlyAt: the checkpoint
// read nothing of a later version), and the least
// of their event times over the topics read (0 when one topic has no
// version consumed, or none at all is read yet); ok is false when the
// positions of that checkpoint are not known in this process (see
// kafka.Positions.At).
func (u *Upstream) Consumed(ctx context.Context, checkpoint uint64) (Inputs, bool, error) {
	at, ok := u.positions.At(barrier.CheckpointID(checkpoint))
	if !ok {
		return Inputs{}, false, nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.mu.closed {
		return Inputs{}, false, errors.New("upstream versions: closed")
	}
	in := Inputs{Changelogs: true}
	if len(at) > 0 || len(u.topics) > 0 {
		in.UpstreamEventTimeMs = math.MaxInt64
	}
	read := slices.AppendSeq(slices.Clone(u.topics), maps.Keys(at))
	slices.Sort(read)
	for _, topic := range slices.Compact(read) {
		r := u.mu.readers[topic]
		if r == nil {
			var err error
			if r, err = newVersionsReader(u.conn, u.versionsTopicOf(topic), upstreamKept); err != nil {
				return Inputs{}, false, err
			}
			u.mu.readers[topic] = r
		}
		if err := r.catchUp(ctx, upstreamSettle); err != nil {
			return Inputs{}, false, err
		}
		pos := at[topic]
		positions := func(p int32) int64 { return pos[p] }
		// Version 0: none consumed completely yet, so that the version
		// still says the job reads the table.
		uv := changelogfmt.UpstreamVersion{Topic: topic, Exact: true}
		for _, p := range pos {
			uv.Exact = uv.Exact && p == 0
		}
		if len(r.list) > 0 {
			uv.Table, uv.TableID = r.list[0].Table, r.list[0].TableID
		}
		eventTime := int64(0) // none consumed
		for i := len(r.list) - 1; i >= 0; i-- {
			v := &r.list[i]
			if v.Topic == topic && v.Covers(positions) {
				uv = changelogfmt.UpstreamVersion{Table: v.Table, TableID: v.TableID, Topic: topic, Version: v.Version,
					Exact: v.ExactlyAt(positions)}
				eventTime = v.EventTimeMs
				break
			}
		}
		in.Upstream = append(in.Upstream, uv)
		in.UpstreamEventTimeMs = min(in.UpstreamEventTimeMs, eventTime)
	}
	return in, true, nil
}

// Positions returns the positions it reads.
func (u *Upstream) Positions() *kafka.Positions { return u.positions }

// Close closes the clients; Consumed fails afterwards.
func (u *Upstream) Close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.mu.closed = true
	for _, r := range u.mu.readers {
		r.cl.Close()
	}
}
