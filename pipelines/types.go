package pipelines

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Duration is a Go duration string in a file ("10s", "1m30s"), never
// negative.
type Duration time.Duration

// UnmarshalText parses a duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (write a number and a unit: 500ms, 10s, 1m30s)", b)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	*d = Duration(v)
	return nil
}

func (*Duration) expected() string { return "a duration" }

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// FlushInterval is how long a table sink's writes may wait in the writer
// before they reach the table: a duration of at least 1ms, or checkpoint
// (they reach it at the next checkpoint).
type FlushInterval time.Duration

// FlushAtCheckpoint is the FlushInterval written "checkpoint".
const FlushAtCheckpoint FlushInterval = -1

// UnmarshalText parses a duration or "checkpoint".
func (f *FlushInterval) UnmarshalText(b []byte) error {
	if string(b) == "checkpoint" {
		*f = FlushAtCheckpoint
		return nil
	}
	var d Duration
	if err := d.UnmarshalText(b); err != nil {
		return fmt.Errorf("%w, or checkpoint", err)
	}
	if d.Std() < time.Millisecond {
		return fmt.Errorf("flush interval %q is below 1ms (checkpoint: flush at checkpoints only)", b)
	}
	*f = FlushInterval(d)
	return nil
}

func (*FlushInterval) expected() string { return "a duration or checkpoint" }

func (f FlushInterval) String() string {
	if f == FlushAtCheckpoint {
		return "checkpoint"
	}
	return time.Duration(f).String()
}

// Size is a number of bytes, written with an optional unit: B, KiB, MiB,
// GiB, TiB (powers of 1024) or kB, MB, GB, TB (powers of 1000).
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// UnmarshalText parses a size.
func (s *Size) UnmarshalText(b []byte) error {
	t := strings.TrimSpace(string(b))
	mult := int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || n*float64(mult) > math.MaxInt64 {
		return fmt.Errorf("invalid size %q (write a number and a unit: 512KiB, 64MiB, 1GB)", b)
	}
	*s = Size(n * float64(mult))
	return nil
}

func (*Size) expected() string { return "a size" }

// Secret is a string that is never printed (a password).
type Secret string

// String masks the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "******"
}

// MarshalText masks the secret in JSON and YAML output.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Number is an integer or a floating-point number, as written.
type Number struct {
	Int     int64
	Float   float64
	IsFloat bool
}

// UnmarshalText parses a number; it is an integer unless written with a
// fraction or an exponent.
func (n *Number) UnmarshalText(b []byte) error {
	if i, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*n = Number{Int: i, Float: float64(i)}
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Errorf("expected a number, got %q", b)
	}
	*n = Number{Float: f, IsFloat: true}
	return nil
}

func (*Number) expected() string { return "a number" }

// StartOffset is where a Kafka source without checkpoint starts, in the
// syntax of the Kafka source: earliest, latest, committed,
// committed-else-latest or timestamp:<RFC 3339 time or Unix milliseconds>.
type StartOffset string

var startOffsets = []string{"earliest", "latest", "committed", "committed-else-latest"}

// UnmarshalText checks the syntax.
func (s *StartOffset) UnmarshalText(b []byte) error {
	v := string(b)
	if ts, ok := strings.CutPrefix(v, "timestamp:"); ok {
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
				return fmt.Errorf("%q: want timestamp:<RFC 3339 time or Unix milliseconds>", v)
			}
		}
	} else if !slices.Contains(startOffsets, v) {
		return fmt.Errorf("%q is not one of %s or timestamp:<time>%s", v, strings.Join(startOffsets, ", "), suggest(v, startOffsets))
	}
	*s = StartOffset(v)
	return nil
}

// Expr is the source text of an expression (see package doc).
type Expr string

func (*Expr) expected() string { return "an expression (a string)" }

// The enumerations of the file. Each lists its values for the decoder.
type (
	// Format is how a Kafka record value is decoded.
	Format string
	// Isolation is the Kafka isolation level.
	Isolation string
	// OnError is the policy for a record that cannot be processed.
	OnError string
	// Mechanism is a SASL mechanism.
	Mechanism string
	// OnDelete is a table's delete behaviour.
	OnDelete string
	// ChangelogFormat is the wire format of a changelog topic.
	ChangelogFormat string
	// ChangelogMode says which changes a changelog publishes.
	ChangelogMode string
	// CheckpointMode is exactly_once or at_least_once.
	CheckpointMode string
	// LogLevel is the least level logged.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string
	// EmitMode says when a windowed table's rows are written.
	EmitMode string
	// LatePolicy says what happens to a record whose window closed.
	LatePolicy string
	// Align says where a changelog source's checkpoints are cut.
	Align string
	// VersionsBy says where a job's versions are cut.
	VersionsBy string
)

// Changelog reports whether the format decodes changelog records (+I, -U,
// +U, -D) rather than plain ones.
func (f Format) Changelog() bool { return f == FormatUpsertJSON || f == FormatDebeziumJSON }

// Topics names the Kafka topics the source reads, for lineage: a Kafka
// source's topics, or its topic_pattern between slashes ("/orders-.*/"),
// a datagen source's topic; none for other sources.
func (s *Source) Topics() []string {
	switch {
	case s.Kafka != nil && s.Kafka.TopicPattern != "":
		return []string{"/" + s.Kafka.TopicPattern + "/"}
	case s.Kafka != nil:
		return s.Kafka.Topics
	case s.Datagen != nil && s.Datagen.Topic != "":
		return []string{s.Datagen.Topic}
	}
	return nil
}

// The values of the enumerations that code compares against.
const (
	FormatJSON         Format = "json"
	FormatRaw          Format = "raw"
	FormatUpsertJSON   Format = "upsert-json"
	FormatDebeziumJSON Format = "debezium-json"

	OnErrorFail       OnError = "fail"
	OnErrorSkip       OnError = "skip"
	OnErrorDeadLetter OnError = "dead_letter"

	EmitUpdates EmitMode = "updates"
	EmitFinal   EmitMode = "final"

	LateDrop       LatePolicy = "drop"
	LateDeadLetter LatePolicy = "dead_letter"
	LateUpdate     LatePolicy = "update"
	AlignNone      Align      = "none"
	AlignVersions  Align      = "versions"

	VersionsByCheckpoint VersionsBy = "checkpoint"
	VersionsByEventTime  VersionsBy = "event_time"
)

func (Format) enumValues() []string {
	return []string{"json", "raw", "upsert-json", "debezium-json"}
}
func (Isolation) enumValues() []string { return []string{"read_committed", "read_uncommitted"} }
func (OnError) enumValues() []string   { return []string{"fail", "skip", "dead_letter"} }
func (Mechanism) enumValues() []string {
	return []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
}
func (OnDelete) enumValues() []string        { return []string{"ignore", "reject", "allow"} }
func (ChangelogFormat) enumValues() []string { return []string{"upsert-json", "debezium-json"} }
func (ChangelogMode) enumValues() []string   { return []string{"committed", "uncommitted"} }
func (CheckpointMode) enumValues() []string  { return []string{"exactly_once", "at_least_once"} }
func (LogLevel) enumValues() []string        { return []string{"debug", "info", "warn", "error"} }
func (LogFormat) enumValues() []string       { return []string{"text", "json"} }
func (EmitMode) enumValues() []string        { return []string{"updates", "final"} }
func (LatePolicy) enumValues() []string      { return []string{"drop", "dead_letter", "update"} }
func (Align) enumValues() []string           { return []string{"none", "versions"} }
func (VersionsBy) enumValues() []string      { return []string{"checkpoint", "event_time"} }
