package kafka

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Config configures a Kafka source. The zero value of every optional field
// takes the default noted.
type Config struct {
	// Connection is how the source reaches the cluster; Brokers is
	// required. ClientOptions that change what is consumed or how offsets
	// are managed break the source's guarantees.
	Connection
	// Topics are the topics to read, by name. Exactly one of Topics and
	// TopicPattern is set.
	Topics []string
	// TopicPattern reads every topic whose name matches this regular
	// expression (Go syntax, matching anywhere unless anchored; internal
	// topics never match).
	TopicPattern string
	// Partitions, if set, are the only partition numbers read of each
	// topic (the partitions of a repartition topic that a scaled job's
	// instance owns, docs/SCALING.md); they are spread over the subtasks
	// by SubtaskFor as usual. Nil: every partition.
	Partitions []int32
	// Start is where a job that has no checkpoint for this source begins
	// (StartEarliest by default). It is never used on restore: then every
	// partition resumes at its checkpointed offset, and partitions missing
	// from the checkpoint (created or matched later) start from the earliest
	// offset.
	Start StartPosition
	// StartOnRestore makes Start apply on restore too: every partition
	// begins at Start, never at its checkpointed offset (the positions of
	// the restored checkpoint are then Start's). For the stage 2 of a
	// scaled job with dynamic ownership, whose handovers say where each
	// partition resumes (docs/SCALING.md). Not with Bounded or Align.
	StartOnRestore bool
	// Group is a consumer group that the offsets of completed checkpoints are
	// committed to, for lag monitoring only, and that StartCommitted reads.
	// Empty: no commits. Committed offsets are never read back on restore.
	Group string
	// ReadUncommitted also reads records of open and aborted transactions.
	// By default the source reads committed records only (read_committed).
	ReadUncommitted bool
	// Bounded makes the source end by itself, like Flink's bounded
	// KafkaSource with latest offsets: at its first open it records the end
	// offset of every partition it reads (the last stable offset under
	// read_committed, the high watermark otherwise), reads up to it, and
	// then ends, so that the job finishes with a final checkpoint. The stop
	// offsets are checkpointed: a restored bounded job stops where the
	// original run would have. Partitions created after the first open are
	// not read. Restoring a checkpoint without stop offsets (of an unbounded
	// run, or from before bounded sources) records them at that open.
	Bounded bool
	// DiscoveryInterval is how often new partitions and topics are looked
	// for (10s). Negative: only once, when the source opens (a restored
	// source still finds the partitions created while it was down).
	DiscoveryInterval time.Duration
	// StartTimeout bounds resolving the start offsets of a job without
	// checkpoint (30s). A restored source needs no broker to open.
	StartTimeout time.Duration
	// OnDecodeError is what happens to a record its format cannot decode
	// (Fail by default).
	OnDecodeError ErrorPolicy
	// DeadLetterTopic receives undecodable records under DeadLetter, over
	// the source's Connection.
	DeadLetterTopic string
	// EventTime, if set, makes the source assign event time and emit
	// watermarks per partition (nil: no event time).
	EventTime *EventTime
	// Positions, if set, records where the source had read every
	// partition at each checkpoint (see Positions): for a source reading
	// ebbflow changelogs, which upstream versions a checkpoint consumed.
	Positions *Positions
	// Align, if set, makes the source cut the job's checkpoints exactly at
	// version boundaries of the ebbflow changelogs it reads (see
	// Boundaries and docs/CONSISTENCY.md): it holds every partition at the
	// end offsets of the next upstream version until every partition of
	// every subtask reached them, then the checkpoint is taken there, and
	// only then does it read on. Needs Topics (not TopicPattern), the
	// earliest start, read_committed, an unbounded source, and every
	// partition (no Partitions).
	Align Boundaries
	// AlignInterval, with Align, is the job's checkpoint interval: for that
	// long after a checkpoint the source reads on to each newer upstream
	// version it learns of, and only then fixes the next cut at the newest
	// one and opens its gate (0: it fixes the cut right after the
	// checkpoint, at the newest version known then). So a version
	// published during the interval is in the next checkpoint rather than
	// the one after.
	AlignInterval time.Duration
	// Cuts, if set, makes the source cut the job's checkpoints on
	// event-time boundaries (see Cuts): the checkpoint of boundary t holds
	// exactly the records with an event time at or before t. Needs
	// EventTime, an unbounded source, no Align; the job's only source.
	Cuts *Cuts
}

// ErrorPolicy says what happens to a record that cannot be decoded.
type ErrorPolicy uint8

const (
	// Fail makes Read return an error naming the record: the job fails.
	Fail ErrorPolicy = iota
	// Skip drops the record, counting it in
	// ebbflow_source_records_dropped_total{reason="decode_error"}.
	Skip
	// DeadLetter writes the record to Config.DeadLetterTopic with the reason
	// and its origin in headers; the write is durable before the checkpoint
	// covering the record completes.
	DeadLetter
)

func (p ErrorPolicy) String() string {
	switch p {
	case Fail:
		return "fail"
	case Skip:
		return "skip"
	case DeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("ErrorPolicy(%d)", uint8(p))
}

// ParseErrorPolicy parses "fail", "skip" or "dead_letter".
func ParseErrorPolicy(s string) (ErrorPolicy, error) {
	for _, p := range []ErrorPolicy{Fail, Skip, DeadLetter} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("kafka: unknown error policy %q (want fail, skip or dead_letter)", s)
}

type startKind uint8

const (
	startEarliest startKind = iota
	startLatest
	startCommitted
	startTimestamp
	startOffsets
	startLogStart // the earliest offset now, for bounded sources only
)

// StartPosition is where a source without checkpoint begins.
type StartPosition struct {
	kind     startKind
	at       time.Time
	offsets  map[string]map[int32]int64
	fallback startKind // for startCommitted: earliest or latest
}

// StartEarliest starts at the earliest offset of every partition.
func StartEarliest() StartPosition { return StartPosition{kind: startEarliest} }

// StartLatest starts after the last record of every partition (after the
// last stable offset under read_committed) at the time the job starts.
func StartLatest() StartPosition { return StartPosition{kind: startLatest} }

// StartCommitted starts at the offsets committed by Config.Group; partitions
// without a committed offset start at orElse, which is StartEarliest or
// StartLatest.
func StartCommitted(orElse StartPosition) StartPosition {
	return StartPosition{kind: startCommitted, fallback: orElse.kind}
}

// StartAt starts at the first record whose timestamp is at or after t (the
// end of a partition that has none).
func StartAt(t time.Time) StartPosition { return StartPosition{kind: startTimestamp, at: t} }

// StartOffsets starts every listed partition at its offset (topic →
// partition → offset); partitions not listed start at the earliest offset.
func StartOffsets(offsets map[string]map[int32]int64) StartPosition {
	return StartPosition{kind: startOffsets, offsets: offsets}
}

func (s StartPosition) String() string {
	switch s.kind {
	case startEarliest:
		return "earliest"
	case startLatest:
		return "latest"
	case startCommitted:
		return "committed (else " + StartPosition{kind: s.fallback}.String() + ")"
	case startTimestamp:
		return "timestamp " + s.at.UTC().Format(time.RFC3339Nano)
	case startOffsets:
		return fmt.Sprintf("offsets %v", s.offsets)
	}
	return fmt.Sprintf("StartPosition(%d)", s.kind)
}

// ParseStartPosition parses "earliest", "latest", "committed" (else
// earliest), "committed-else-latest", or "timestamp:<RFC 3339 time or Unix
// milliseconds>".
func ParseStartPosition(s string) (StartPosition, error) {
	switch s {
	case "earliest":
		return StartEarliest(), nil
	case "latest":
		return StartLatest(), nil
	case "committed":
		return StartCommitted(StartEarliest()), nil
	case "committed-else-latest":
		return StartCommitted(StartLatest()), nil
	}
	if ts, ok := strings.CutPrefix(s, "timestamp:"); ok {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			return StartAt(t), nil
		}
		var ms int64
		if _, err := fmt.Sscanf(ts, "%d", &ms); err == nil && fmt.Sprint(ms) == ts {
			return StartAt(time.UnixMilli(ms)), nil
		}
		return StartPosition{}, fmt.Errorf("kafka: start position %q: want an RFC 3339 time or Unix milliseconds", s)
	}
	return StartPosition{}, fmt.Errorf("kafka: unknown start position %q (want earliest, latest, committed, committed-else-latest or timestamp:<time>)", s)
}

const (
	defaultDiscoveryInterval = 10 * time.Second
	defaultStartTimeout      = 30 * time.Second
	defaultClientID          = "ebbflow"
)

// normalized returns cfg with defaults applied, or every problem found.
func (cfg Config) normalized() (Config, *regexp.Regexp, error) {
	var errs []error
	if len(cfg.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	var re *regexp.Regexp
	switch {
	case len(cfg.Topics) == 0 && cfg.TopicPattern == "":
		errs = append(errs, errors.New("no topics: set Topics or TopicPattern"))
	case len(cfg.Topics) > 0 && cfg.TopicPattern != "":
		errs = append(errs, errors.New("both Topics and TopicPattern set"))
	case cfg.TopicPattern != "":
		var err error
		if re, err = regexp.Compile(cfg.TopicPattern); err != nil {
			errs = append(errs, fmt.Errorf("topic pattern: %w", err))
		}
	}
	for _, t := range cfg.Topics {
		if t == "" {
			errs = append(errs, errors.New("empty topic name"))
		}
	}
	for _, p := range cfg.Partitions {
		if p < 0 {
			errs = append(errs, fmt.Errorf("partition %d is negative", p))
		}
	}
	if cfg.Start.kind == startCommitted && cfg.Group == "" {
		errs = append(errs, errors.New("start position committed needs a Group"))
	}
	if cfg.Start.kind == startCommitted && cfg.Start.fallback != startEarliest && cfg.Start.fallback != startLatest {
		errs = append(errs, errors.New("start position committed: fallback must be earliest or latest"))
	}
	switch cfg.OnDecodeError {
	case Fail, Skip:
	case DeadLetter:
		if cfg.DeadLetterTopic == "" {
			errs = append(errs, errors.New("error policy dead_letter needs a DeadLetterTopic"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown error policy %d", cfg.OnDecodeError))
	}
	if cfg.Align != nil {
		switch {
		case cfg.TopicPattern != "":
			errs = append(errs, errors.New("align needs Topics, not a TopicPattern"))
		case cfg.Bounded:
			errs = append(errs, errors.New("align: a bounded source cannot wait for versions"))
		case cfg.ReadUncommitted:
			errs = append(errs, errors.New("align needs read_committed"))
		case cfg.Start.kind != startEarliest:
			errs = append(errs, fmt.Errorf("align starts at the earliest offsets (the empty version), not %s", cfg.Start))
		case cfg.Partitions != nil:
			errs = append(errs, errors.New("align needs every partition in this job: not with Partitions"))
		}
	}
	if cfg.StartOnRestore && (cfg.Bounded || cfg.Align != nil) {
		errs = append(errs, errors.New("StartOnRestore is not for a bounded or aligned source"))
	}
	if cfg.EventTime != nil {
		if err := cfg.EventTime.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.Cuts != nil {
		switch {
		case cfg.EventTime == nil:
			errs = append(errs, errors.New("cuts on event-time boundaries need EventTime"))
		case cfg.Bounded:
			errs = append(errs, errors.New("cuts: a bounded source ends event time, not at a boundary"))
		case cfg.Align != nil:
			errs = append(errs, errors.New("cuts and align both choose where checkpoints cut: not both"))
		}
	}
	if cfg.SASL != nil {
		if err := cfg.SASL.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.DiscoveryInterval == 0 {
		cfg.DiscoveryInterval = defaultDiscoveryInterval
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = defaultStartTimeout
	}
	if cfg.ClientID == "" {
		cfg.ClientID = defaultClientID
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, nil, fmt.Errorf("kafka source: %w", err)
	}
	return cfg, re, nil
}

// String describes cfg for logs, with secrets redacted.
func (cfg Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "brokers=%v", cfg.Brokers)
	if cfg.TopicPattern != "" {
		fmt.Fprintf(&b, " topic_pattern=%q", cfg.TopicPattern)
	} else {
		fmt.Fprintf(&b, " topics=%v", cfg.Topics)
	}
	fmt.Fprintf(&b, " start=%s", cfg.Start)
	if cfg.Group != "" {
		fmt.Fprintf(&b, " group=%q", cfg.Group)
	}
	if cfg.ReadUncommitted {
		b.WriteString(" isolation=read_uncommitted")
	}
	if cfg.Bounded {
		b.WriteString(" bounded")
	}
	fmt.Fprintf(&b, " on_decode_error=%s", cfg.OnDecodeError)
	if cfg.DeadLetterTopic != "" {
		fmt.Fprintf(&b, " dead_letter_topic=%q", cfg.DeadLetterTopic)
	}
	cfg.Connection.appendSecurity(&b)
	return b.String()
}

// GoString redacts like String, for %#v.
func (cfg Config) GoString() string { return "kafka.Config{" + cfg.String() + "}" }
