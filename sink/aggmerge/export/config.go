package export

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// Config configures the exporter of one table.
type Config struct {
	// Table is the exported table; the caller opens and closes it.
	Table *aggmerge.Table
	// Name is the table's name: it is written in the table header and
	// names the default topic and transactional id. Required.
	Name string
	// Topic is the changelog topic ("<Name>-changelog"). It is created with
	// one partition per bucket when absent; an existing topic must have
	// exactly that many partitions. Partition = bucket.
	Topic string
	// Kafka is the connection to the cluster of the topic.
	Kafka kafka.Connection
	// Buckets, if set, are the only buckets this exporter exports: an
	// instance of a scaled job holds only the buckets it owns, and the
	// topic's other partitions are other instances' exporters' (each with
	// its own transactional id and versions topic), neither read nor
	// checked here. A version's EndOffsets then name these partitions
	// only (0 elsewhere): ReadShared joins the owners' versions. Nil:
	// every bucket.
	Buckets []int
	// Mode is Committed (default) or Uncommitted.
	Mode Mode
	// Format is UpsertJSON (default) or DebeziumJSON.
	Format Format
	// TransactionalID is the producer's transactional id, fixed per table
	// so that a zombie exporter is fenced ("ebbflow-export-<Name>"). It is
	// cluster-wide: two exporters with the same id fence each other, so
	// give every deployment of a table its own (the runner derives it from
	// its data directory's deployment id, the job and the table).
	TransactionalID string
	// FormerTransactionalIDs are ids this table's exporter used before,
	// whose holds are still on the table's log. On its first start the
	// exporter initialises each once, which completes or aborts a
	// transaction it left open (so the topic's end is final before it
	// resumes), and releases its hold.
	FormerTransactionalIDs []string
	// CheckpointInterval is the checkpoint interval of the jobs writing the
	// table (1 min): the transaction timeout is derived from it (see
	// transactionTimeout).
	CheckpointInterval time.Duration
	// MaxRecordsPerTxn bounds the records of one transaction (100,000). In
	// committed mode it also bounds a range's keys (a change per key), so
	// it is what a range can fold: a bucket's keys changed per checkpoint
	// should fit in its share. The exporter keeps a range's images in
	// memory: roughly 0.7 KB per key for a few int columns.
	MaxRecordsPerTxn int
	// PollInterval is how often an idle exporter looks for new entries
	// (10 ms).
	PollInterval time.Duration
	// Replication is the replication factor of a created topic (-1: the
	// broker's default).
	Replication int16
	// TopicConfig is the configuration of a created topic; by default
	// cleanup.policy=compact (both formats write a tombstone per delete).
	TopicConfig map[string]*string
	// NoVersions turns off the table versions of committed mode (see the
	// package doc); uncommitted mode publishes none.
	NoVersions bool
	// VersionsTopic is the compacted topic of the table's versions
	// ("<Topic>.versions", changelogfmt.VersionsTopic), created with one
	// partition and cleanup.policy=compact when absent.
	VersionsTopic string
	// VersionsHistory is how many recent versions a reader finds (1000):
	// a version's record key is its number mod VersionsHistory, so
	// compaction keeps at least the newest VersionsHistory versions.
	VersionsHistory int
	// VersionsFile, if set, keeps the newest versions (up to 100) in the
	// data dir, written crash-safe after each one is committed
	// (ReadVersionsFile reads it).
	VersionsFile string
	// Writers are the ids of the exactly-once writers ("<job>/<sink>#<i>")
	// that write the table now: a version holds, per writer group, the
	// checkpoint all of its listed writers committed. Empty: every writer
	// registered with the table (then unregister a subtask a rescale
	// removed, or versions wait for it forever).
	Writers []string
	// Upstream, if set, tells for each writer's job which upstream
	// versions its checkpoint consumed completely; a version records them.
	Upstream UpstreamFunc
	// Registerer receives the metrics (nil: a private registry).
	Registerer prometheus.Registerer
	// Logger receives the logs (nil: discarded).
	Logger *slog.Logger
	// Now gives Debezium's ts_ms (time.Now); tests fix it.
	Now func() time.Time
}

// DefaultTransactionalID is the transactional id, and so the log holder
// (Exporter.Holder), of the exporter of the table named name when Config
// gives none.
func DefaultTransactionalID(name string) string { return "ebbflow-export-" + name }

func (c *Config) setDefaults() {
	if c.Topic == "" {
		c.Topic = c.Name + "-changelog"
	}
	if c.Mode == "" {
		c.Mode = Committed
	}
	if c.Format == "" {
		c.Format = UpsertJSON
	}
	if c.TransactionalID == "" {
		c.TransactionalID = DefaultTransactionalID(c.Name)
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = time.Minute
	}
	if c.MaxRecordsPerTxn <= 0 {
		c.MaxRecordsPerTxn = 100_000
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 10 * time.Millisecond
	}
	if c.Replication == 0 {
		c.Replication = -1
	}
	if c.TopicConfig == nil {
		compact := "compact"
		c.TopicConfig = map[string]*string{"cleanup.policy": &compact}
	}
	if c.VersionsTopic == "" {
		c.VersionsTopic = changelogfmt.VersionsTopic(c.Topic)
	}
	if c.VersionsHistory <= 0 {
		c.VersionsHistory = 1000
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Table == nil {
		errs = append(errs, errors.New("no table"))
	}
	if c.Name == "" {
		errs = append(errs, errors.New("no table name"))
	}
	if len(c.Kafka.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if c.Table != nil {
		n := c.Table.Schema().Buckets
		for _, b := range c.Buckets {
			if b < 0 || b >= n {
				errs = append(errs, fmt.Errorf("bucket %d of a table of %d buckets", b, n))
			}
		}
	}
	switch c.Mode {
	case Committed, Uncommitted:
	default:
		errs = append(errs, fmt.Errorf("unknown mode %q (want committed or uncommitted)", c.Mode))
	}
	if _, err := c.Format.codec(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("changelog exporter: %w", err)
	}
	return nil
}

// Transaction timeout bounds: Kafka's default transaction.max.timeout.ms is
// 15 minutes.
const (
	minTxnTimeout = 10 * time.Second
	maxTxnTimeout = 15 * time.Minute
)

// transactionTimeout is two checkpoint intervals plus 10 s, within
// [10 s, 15 min]. A transaction holds one export round, which is short, but
// while it is open a read_committed consumer sees nothing past it: a dead
// exporter must not hide the changelog much longer than the table's own
// visibility delay (one checkpoint interval in committed mode).
func transactionTimeout(checkpoint time.Duration) time.Duration {
	return min(max(2*checkpoint+10*time.Second, minTxnTimeout), maxTxnTimeout)
}
