package pipelines

import (
	"slices"
	"strings"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Spec is one job file as written, after defaults, ${VAR} substitution and
// --set overrides. Validation results (schemas, compiled expressions) are in
// Pipeline; Spec is plain data.
type Spec struct {
	Job             JobSection  `yaml:"job" required:"true" doc:"the job's identity and parallelism"`
	Sources         []Source    `yaml:"source" required:"true" form:"one" doc:"one source, or a list of sources whose records are merged (union); every source must give the same fields"`
	Transforms      []Transform `yaml:"transforms" doc:"steps applied in order to every record"`
	KeyBy           []string    `yaml:"key_by" doc:"the fields records are partitioned by; when given it must equal the primary_key of every table sink"`
	Sinks           []Sink      `yaml:"sink" required:"true" form:"one" doc:"one sink, or a list of sinks that all receive every record"`
	Checkpoint      Checkpoint  `yaml:"checkpoint" doc:"periodic aligned checkpoints"`
	Versions        Versions    `yaml:"versions" doc:"where the versions of the tables the job writes are cut (docs/CONSISTENCY.md)"`
	Restart         Restart     `yaml:"restart" doc:"in-process restarts after a failure, each from the latest checkpoint"`
	DataDir         string      `yaml:"data_dir" default:"./data" doc:"holds tables, checkpoints and state; --data-dir overrides it"`
	HTTP            HTTP        `yaml:"http" doc:"the HTTP server: API, dashboard, /metrics, /livez, /readyz"`
	EmbeddedKafka   Embedded    `yaml:"embedded_kafka" doc:"the runner's in-process Kafka broker, started when a job uses it (brokers absent or [embedded])"`
	Logging         Logging     `yaml:"logging" doc:"log output"`
	ShutdownTimeout Duration    `yaml:"shutdown_timeout" default:"1m" doc:"after a stop signal, how long draining and the final checkpoint may take before the job is aborted"`
}

// JobSection names the job.
type JobSection struct {
	Name           string `yaml:"name" required:"true" doc:"the job's name: letters, digits, '.', '_' and '-'; unique among the jobs of a runner; names its checkpoints and state"`
	Parallelism    int    `yaml:"parallelism" default:"1" min:"1" max:"32768" doc:"subtasks per operator"`
	MaxParallelism int    `yaml:"max_parallelism" default:"128" min:"1" max:"32768" doc:"key groups: the most a job can ever be rescaled to; fixed for the job's life"`
	Scale          *Scale `yaml:"scale" doc:"run the job in several runner processes that share it through Kafka (docs/SCALING.md); absent: this runner runs all of it"`
}

// Source is one input of the job: exactly one of its kinds.
type Source struct {
	Name    string         `yaml:"name" doc:"the operator's name (default: the kind, numbered when several sources share it)"`
	Kafka   *KafkaSource   `yaml:"kafka" doc:"read Kafka topics"`
	Datagen *DatagenSource `yaml:"datagen" doc:"generate records"`
	// Registered is the spec of a source of a kind registered from Go
	// (Registry); nil for the built-in kinds.
	Registered *Registered `yaml:"-"`
}

// KafkaSource reads records from Kafka topics, with its partitions assigned
// explicitly to subtasks and offsets kept in checkpoints.
type KafkaSource struct {
	Connection      `yaml:",inline"`
	Topics          []string    `yaml:"topics" doc:"the topics to read; give topics or topic_pattern"`
	TopicPattern    string      `yaml:"topic_pattern" doc:"read every topic whose name matches this regular expression (Go syntax)"`
	Group           string      `yaml:"group" doc:"consumer group offsets are committed to after each checkpoint, for lag monitoring only (default: the job name)"`
	Format          Format      `yaml:"format" default:"json" doc:"how a record value is decoded: json (an object whose keys are the schema's fields), raw (the value as one field), or a changelog whose updates and deletes retract: upsert-json (key = primary key, value = row or null; the old row is kept in state) or debezium-json (before/after/op)"`
	Schema          []Field     `yaml:"schema" form:"map" doc:"field name to type (string, int64, float64, bool, decimal(p,s), timestamp, bytes); required for json and the changelog formats (the fields of a row image); for raw at most key and value, string or bytes (default {value: string})"`
	StartOffset     StartOffset `yaml:"start_offset" default:"earliest" doc:"where a job without checkpoint starts: earliest, latest, committed (the group's offsets, else earliest), committed-else-latest, or timestamp:<RFC 3339 time or Unix milliseconds>"`
	Discovery       Duration    `yaml:"discovery_interval" default:"10s" doc:"how often new partitions and topics are looked for (a named topic that does not exist yet: sooner, from 100ms doubling up to it); 0s: only when the source opens (also on a restore)"`
	IsolationLevel  Isolation   `yaml:"isolation_level" default:"read_committed" doc:"read_committed or read_uncommitted"`
	Bounded         bool        `yaml:"bounded" default:"false" doc:"true: read every partition up to its end offset as of the job's first start (the last stable offset under read_committed), then end the job with a final checkpoint; the stop offsets are checkpointed, so a restored job stops at the same offsets; partitions created later are not read (no discovery_interval)"`
	OnError         OnError     `yaml:"on_error" default:"fail" doc:"a record that cannot be decoded or whose expressions fail: fail the job (at once, without restarts), skip it (counted in a metric) or dead_letter it"`
	DeadLetterTopic string      `yaml:"dead_letter_topic" doc:"where on_error: dead_letter sends failed records, with the error in a header; required with dead_letter"`
	FetchMaxBytes   Size        `yaml:"fetch_max_bytes" default:"50MiB" min:"1KiB" doc:"the most bytes one fetch may return"`
	EventTime       *EventTime  `yaml:"event_time" doc:"assign event time to the records and emit watermarks per partition (docs/EVENT_TIME.md); absent: no event time"`
	Align           Align       `yaml:"align" default:"none" doc:"for a changelog format: versions cuts the job's checkpoints exactly at the version boundaries of the upstream tables (docs/CONSISTENCY.md): each partition holds at the end offsets of the next upstream version until every partition reached them, then the checkpoint goes through; needs topics, start_offset earliest, read_committed, not bounded"`
}

// EventTime is where a source's records take their event time from and how
// its watermarks follow it.
type EventTime struct {
	Field             string   `yaml:"field" doc:"the schema field holding the event time: a timestamp, or an int64 of Unix milliseconds; give field or kafka_timestamp"`
	KafkaTimestamp    bool     `yaml:"kafka_timestamp" default:"false" doc:"true: the event time is the record's Kafka timestamp"`
	MaxOutOfOrderness Duration `yaml:"max_out_of_orderness" default:"0s" doc:"how far a record may be behind the largest event time read before it from its partition without being late: each partition's watermark is its largest event time minus this"`
	IdleTimeout       Duration `yaml:"idle_timeout" default:"0s" doc:"a partition without records for this long stops holding the watermark back until its next record; 0s: never (an empty partition then holds it back for good)"`
}

// Connection is how a client reaches Kafka. The brokers "embedded" (or
// none) mean the runner's in-process broker.
type Connection struct {
	Brokers  []string `yaml:"brokers" doc:"seed brokers host:port; [embedded]: the runner's in-process broker; empty: the embedded broker (a changelog's: the cluster of the job's Kafka sources)"`
	ClientID string   `yaml:"client_id" default:"ebbflow" doc:"the Kafka client id"`
	TLS      *TLS     `yaml:"tls" doc:"encrypt the connection (present: on)"`
	SASL     *SASL    `yaml:"sasl" doc:"authenticate"`
}

// Embedded reports whether c means the runner's in-process broker.
func (c *Connection) Embedded() bool {
	return len(c.Brokers) == 0 || len(c.Brokers) == 1 && c.Brokers[0] == "embedded"
}

// Cluster names where c goes, for logs and validate: "embedded", or the
// brokers joined by commas.
func (c *Connection) Cluster() string {
	if c.Embedded() {
		return "embedded"
	}
	return strings.Join(c.Brokers, ",")
}

// sameCluster reports whether c and o reach the same cluster the same way:
// the same brokers (in any order), TLS and SASL settings.
func (c *Connection) sameCluster(o *Connection) bool {
	if c.Embedded() || o.Embedded() {
		return c.Embedded() == o.Embedded()
	}
	a, b := slices.Sorted(slices.Values(c.Brokers)), slices.Sorted(slices.Values(o.Brokers))
	return slices.Equal(a, b) && (c.TLS == nil) == (o.TLS == nil) && (c.TLS == nil || *c.TLS == *o.TLS) &&
		(c.SASL == nil) == (o.SASL == nil) && (c.SASL == nil || *c.SASL == *o.SASL)
}

// TLS configures an encrypted connection.
type TLS struct {
	CAFile             string `yaml:"ca_file" doc:"PEM file of the CAs to trust (default: the system's)"`
	CertFile           string `yaml:"cert_file" doc:"PEM client certificate, for mutual TLS; needs key_file"`
	KeyFile            string `yaml:"key_file" doc:"PEM client key; needs cert_file"`
	ServerName         string `yaml:"server_name" doc:"the name to verify in the broker's certificate (default: the host)"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" default:"false" doc:"accept any broker certificate (tests only)"`
}

// SASL configures authentication. Put the password in the environment:
// password: ${KAFKA_PASSWORD}.
type SASL struct {
	Mechanism Mechanism `yaml:"mechanism" required:"true" doc:"PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"`
	Username  string    `yaml:"username" required:"true" doc:"the user"`
	Password  Secret    `yaml:"password" required:"true" doc:"the password; write ${ENV_VAR} rather than the secret itself; never printed"`
}

// Field is one typed field of a record.
type Field struct {
	Name string   `key:"true"`
	Type agg.Type `value:"true"`
}

// DatagenSource generates records from a seed: the same seed, count and
// fields give the same records, so a replay after a restore is exact.
type DatagenSource struct {
	Seed   int64      `yaml:"seed" default:"1" doc:"the random seed"`
	Rate   float64    `yaml:"rate" default:"1000" min:"0" doc:"records per second over all subtasks; 0: as fast as possible"`
	Count  int64      `yaml:"count" default:"0" min:"0" doc:"records to generate, then the source ends; 0: endless"`
	Topic  string     `yaml:"topic" doc:"when set, records are produced as JSON into this Kafka topic and the job reads them back from it; else they go straight into the job"`
	Kafka  Connection `yaml:"kafka" doc:"the broker of topic (default: the embedded one)"`
	Fields []GenField `yaml:"fields" required:"true" form:"map" doc:"field name to generator; exactly one of sequence, uniform, one_of, now per field"`
}

// GenField generates one field.
type GenField struct {
	Name     string       `key:"true"`
	Type     *agg.Type    `yaml:"type" doc:"the field's type when the generator's is not wanted (e.g. one_of numbers as int64)"`
	Sequence *SequenceGen `yaml:"sequence" doc:"int64: start, start+step, ..."`
	Uniform  *UniformGen  `yaml:"uniform" doc:"a uniform random number in [min, max]: int64 when both bounds are integers, else float64"`
	OneOf    []string     `yaml:"one_of" doc:"a random element of the list (string unless type says otherwise)"`
	Weights  []float64    `yaml:"weights" doc:"relative weights of one_of's elements (default: equal)"`
	Null     float64      `yaml:"null_ratio" default:"0" min:"0" max:"1" doc:"the share of records where the field is null"`
	Now      bool         `yaml:"now" doc:"timestamp: the wall-clock time (not reproducible); write now: true"`
}

func (*GenField) oneOf() []string { return []string{"sequence", "uniform", "one_of", "now"} }

// SequenceGen counts.
type SequenceGen struct {
	Start int64 `yaml:"start" default:"0" doc:"the first value"`
	Step  int64 `yaml:"step" default:"1" doc:"the increment"`
}

// UniformGen draws uniformly from a closed range.
type UniformGen struct {
	Min Number `yaml:"min" required:"true" doc:"the lower bound"`
	Max Number `yaml:"max" required:"true" doc:"the upper bound, at least min"`
}

// Transform is one step: exactly one of its kinds.
type Transform struct {
	Filter  *Expr    `yaml:"filter" doc:"keep the records for which the bool expression is true"`
	Map     []Assign `yaml:"map" form:"map" doc:"field name to expression: adds or replaces fields; every expression of one map sees the record as it was before the map"`
	Drop    []string `yaml:"drop" doc:"remove these fields"`
	Project []string `yaml:"project" doc:"keep only these fields, in this order"`
	Rename  []Rename `yaml:"rename" form:"map" doc:"old name to new name"`
	Dedupe  *Dedupe  `yaml:"dedupe" doc:"drop the records whose key was seen within a horizon of event time (docs/EVENT_TIME.md#dedupe); the last step"`
	// Registered is the spec of a step of a kind registered from Go
	// (Registry); nil for the built-in kinds.
	Registered *Registered `yaml:"-"`
}

// Dedupe drops repeated records: a record is dropped when a record with the
// same key was kept less than within away from it in event time.
type Dedupe struct {
	Key    []string `yaml:"key" required:"true" form:"one" doc:"the field, or list of fields, that identify a record (an id)"`
	Within Duration `yaml:"within" required:"true" min:"1ms" doc:"the horizon: a record is a duplicate when a record of its key was kept less than this before or after it in event time; what is kept expires as the watermark passes it plus within"`
	On     string   `yaml:"on" doc:"the field holding the record's event time: a timestamp, or an int64 of Unix milliseconds (default: the sources' event_time.field)"`
}

// Assign sets a field to the value of an expression.
type Assign struct {
	Field string `key:"true"`
	Expr  Expr   `value:"true"`
}

// Rename renames a field.
type Rename struct {
	From string `key:"true"`
	To   string `value:"true"`
}

// Sink is one output of the job: exactly one of its kinds.
type Sink struct {
	Name  string     `yaml:"name" doc:"the operator's name (default: the table's name)"`
	Table *TableSink `yaml:"table" doc:"write into an aggregation-merge table"`
}

// TableSink writes records into a primary-key table whose columns aggregate.
type TableSink struct {
	Name       string   `yaml:"name" required:"true" doc:"the table: letters, digits, '.', '_' and '-'; jobs naming the same table share it (their columns must not overlap)"`
	PrimaryKey []string `yaml:"primary_key" required:"true" doc:"the fields that identify a row, in order; each must exist after the transforms and not be a column"`
	Buckets    int      `yaml:"buckets" default:"16" min:"1" max:"65536" doc:"the fixed number of buckets; bucket = stable_hash(primary key) mod buckets"`
	Columns    []Column `yaml:"columns" required:"true" form:"map" doc:"column name to {agg, from, type, params}, in table order"`
	OnDelete   OnDelete `yaml:"on_delete" default:"ignore" doc:"a delete (-D) on input: ignore it, reject it (the job fails) or allow it (the row's columns are removed)"`
	// FlushInterval trades the table's freshness for CPU: see
	// writer.FlushAtCheckpoint and docs/BENCHMARKS.md.
	FlushInterval FlushInterval `yaml:"flush_interval" default:"100ms" doc:"how long the sink combines the rows of a key in memory before writing them to the table: at most this long (at least 1ms), or checkpoint: at each checkpoint only (and when 65536 keys wait), so each key changed in a checkpoint costs one table write and one changelog entry; the table's rows are then as fresh as the last checkpoint; a committed changelog shows nothing sooner in either case"`
	Changelog     *Changelog    `yaml:"changelog" doc:"publish the table's changes to Kafka (absent: not published)"`
	Window        *Window       `yaml:"window" doc:"aggregate per window of event time: window_start and window_end (timestamps) become the last key columns of the table (absent: no window)"`
}

// Window is a table's window of event time: tumbling, hopping or session.
type Window struct {
	Tumble          Duration   `yaml:"tumble" doc:"tumbling windows of this length: [start, start+tumble) with start a multiple of it since the Unix epoch; at least 1ms, a whole number of milliseconds; give tumble, hop or session"`
	Hop             Duration   `yaml:"hop" doc:"hopping windows of this length, one starting every 'every': a record is in hop/every windows, each a row; at least 1ms, a whole number of milliseconds; emit and late as for tumble, applied to each of a record's windows"`
	Every           Duration   `yaml:"every" doc:"with hop: the time between the starts of two windows (a multiple of it since the Unix epoch); divides hop, at most 1000 windows per record"`
	Session         Duration   `yaml:"session" doc:"session windows per key with this gap: records less than the gap apart (in event time) are one session, [first record, last record + gap); a record that bridges two sessions merges them; at least 1ms, a whole number of milliseconds; needs event time on every source, late: drop or dead_letter, and functions whose partials combine in any order (sum, product, count, max, min, bool_and, bool_or, collect_set, rbm32, rbm64, hll)"`
	Retain          *Duration  `yaml:"retain" doc:"delete a window's rows (-D in the changelog) once the watermark the sink receives passes the window's end plus this; a record for a deleted window is dropped (counted); needs event time on every source; with emit: final or a late policy other than update at least allowed_lateness; absent: windows are kept"`
	On              string     `yaml:"on" required:"true" doc:"the timestamp field whose value picks the window of a record"`
	Emit            EmitMode   `yaml:"emit" default:"updates" doc:"updates: a window's row changes as its records arrive (a session merge deletes the merged sessions' rows); final: a window's row is written once, when the watermark passes its end plus allowed_lateness (every source needs event_time)"`
	AllowedLateness Duration   `yaml:"allowed_lateness" default:"0s" doc:"how long in event time a window takes records after its end: a record is late once the watermark passed its window's end plus this (a session's record: its own time plus this); a whole number of milliseconds"`
	Late            LatePolicy `yaml:"late" doc:"a late record: drop it (counted), dead_letter it (to the dead_letter_topic of the job's Kafka source) or update its window's row (emit: updates with tumble or hop only); default: update with emit: updates (no watermark consulted), drop with final or session"`
}

func (*Window) oneOf() []string { return []string{"tumble", "hop", "session"} }

// Column is one aggregating column of a table.
type Column struct {
	Name   string            `key:"true"`
	Agg    string            `yaml:"agg" default:"last_non_null_value" doc:"the aggregate function: sum, product, count, max, min, last_value, last_non_null_value (alias last_value_ignore_nulls), first_value, first_non_null_value (alias first_value_ignore_nulls), listagg, bool_and, bool_or, collect_set, rbm32, rbm64, hll"`
	From   string            `yaml:"from" doc:"the input field (default: the column's name; count without from counts records)"`
	Type   *agg.Type         `yaml:"type" doc:"the column's type (default: derived from the function and the input field's type); may widen int64 to float64 or decimal"`
	Params map[string]string `yaml:"params" doc:"function parameters, e.g. listagg {delimiter: ';'}"`
}

// Changelog publishes a table's changes to a Kafka topic.
type Changelog struct {
	Connection `yaml:",inline"`
	Topic      string          `yaml:"topic" doc:"the topic, one partition per bucket (default: <job>-<table>-changelog)"`
	Format     ChangelogFormat `yaml:"format" default:"upsert-json" doc:"upsert-json (key = primary key, value = row, delete = tombstone) or debezium-json (before/after/op)"`
	Mode       ChangelogMode   `yaml:"mode" default:"committed" doc:"committed (only changes covered by a completed checkpoint) or uncommitted (as written, undo entries included)"`
	// TransactionalID is resolved by the runner (it needs the data
	// directory's deployment id) when empty.
	TransactionalID string `yaml:"transactional_id" doc:"the exporter's Kafka transactional id: letters, digits, '.', '_' and '-'; unique on the cluster, or exporters fence each other (default: ebbflow-<deployment id of the data dir>-<job>-<table>)"`
}

// Checkpoint configures the checkpoint coordinator.
type Checkpoint struct {
	Interval Duration       `yaml:"interval" default:"10s" doc:"time between periodic checkpoints; 0s: only the initial and final ones"`
	MinPause Duration       `yaml:"min_pause" default:"0s" doc:"the least time between the end of one checkpoint and the start of the next"`
	Timeout  Duration       `yaml:"timeout" default:"10m" min:"1ms" doc:"a checkpoint not completed by then is aborted"`
	Retain   int            `yaml:"retain" default:"3" min:"1" doc:"completed checkpoints kept"`
	Mode     CheckpointMode `yaml:"mode" default:"exactly_once" doc:"exactly_once (aligned barriers) or at_least_once"`
	// AlignmentTimeout is off by default: aborting is no cure for a
	// backpressured job (no checkpoint would complete, and exactly-once
	// sinks commit only at completed ones), only for a stalled input.
	AlignmentTimeout Duration `yaml:"alignment_timeout" default:"0s" doc:"a checkpoint whose barrier a subtask has waited for on some inputs this long, since the first reached it, is aborted naming the slow inputs, and the next is tried; 0s: off (wait up to timeout); exactly_once only, shorter than timeout (docs/RUNTIME.md#alignment-timeout)"`
}

// Versions says where the job cuts the versions of the tables it writes.
type Versions struct {
	By    VersionsBy `yaml:"by" default:"checkpoint" doc:"checkpoint: a version at every completed checkpoint; event_time: a version at every multiple of every in event time, holding exactly the input with an event time at or before it (the timestamp barrier, docs/CONSISTENCY.md#timestamp-barriers): the job's checkpoints are taken at those boundaries, as soon as the watermark passes one, not by checkpoint.interval; needs one kafka source with event_time, not a changelog, not bounded, and a table with a changelog in mode committed"`
	Every Duration   `yaml:"every" doc:"with by: event_time, the distance between two boundaries, which are its multiples since the Unix epoch: at least 1ms, whole milliseconds"`
}

// Restart configures in-process restarts.
type Restart struct {
	MaxAttempts    int      `yaml:"max_attempts" default:"10" min:"0" doc:"restarts allowed in a row (a completed checkpoint resets the count); 0: never restart"`
	InitialBackoff Duration `yaml:"initial_backoff" default:"100ms" doc:"the wait before the first restart, doubled at each next one"`
	MaxBackoff     Duration `yaml:"max_backoff" default:"30s" doc:"the longest wait between restarts"`
}

// HTTP configures the runner's HTTP server.
type HTTP struct {
	Address      string   `yaml:"address" default:"127.0.0.1:8081" doc:"host:port to listen on; empty: no server"`
	AllowedHosts []string `yaml:"allowed_hosts" doc:"host names (no port) a request's Host header may name besides localhost, IP addresses and the host of address (docs/RUNNER.md#security)"`
	TLS          *HTTPTLS `yaml:"tls" doc:"serve HTTPS (present: on)"`
}

// Embedded configures the runner's in-process Kafka broker.
type Embedded struct {
	Port int `yaml:"port" min:"0" max:"65535" doc:"its port on 127.0.0.1 (0: any free one); the address is in the runner's summary lines; --embedded-kafka-port overrides it"`
}

// HTTPTLS is the certificate the runner's HTTP server presents.
type HTTPTLS struct {
	CertFile string `yaml:"cert_file" required:"true" doc:"PEM certificate (chain) of the server"`
	KeyFile  string `yaml:"key_file" required:"true" doc:"PEM private key of cert_file"`
}

// Logging configures the log output.
type Logging struct {
	Level  LogLevel  `yaml:"level" default:"info" doc:"debug, info, warn or error"`
	Format LogFormat `yaml:"format" default:"text" doc:"text or json"`
}
