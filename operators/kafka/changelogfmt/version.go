package changelogfmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// VersionFormat is the format number of the version records this package
// writes (the "format" field and the ebbflow.version_format header). It
// grows only on a change a reader of an older format would misread; new
// optional fields do not change it, and readers ignore fields they do not
// know.
const VersionFormat = 1

// The headers of a version record.
const (
	HeaderRecord        = "ebbflow.record"         // "version"
	HeaderVersion       = "ebbflow.version"        // the version number, decimal
	HeaderVersionFormat = "ebbflow.version_format" // VersionFormat, decimal
	HeaderVersionTable  = "ebbflow.table"          // the table's name
	HeaderVersionID     = "ebbflow.table_id"       // the table's identity
)

// RecordVersion is the value of the ebbflow.record header of a version.
const RecordVersion = "version"

// ErrVersion marks a record that is not a version record this package can
// read.
var ErrVersion = errors.New("changelogfmt: not a version record")

// VersionsTopic is the default versions topic of a changelog topic.
func VersionsTopic(changelogTopic string) string { return changelogTopic + ".versions" }

// Version is one version of a table, the value of a record of its
// versions topic (see docs/CHANGELOG.md, "Table versions"). It is
// published, in the transaction that commits the changelog up to it, when a
// completed checkpoint of a job writing the table has been exported.
type Version struct {
	// Format is VersionFormat.
	Format int `json:"format"`
	// Table and TableID name the table; Topic is its changelog topic.
	Table   string `json:"table"`
	TableID string `json:"table_id"`
	Topic   string `json:"topic"`
	// ChangelogFormat is the format of the changelog topic (a Format's
	// Name), so that a reader can materialise the table without being
	// told; absent in versions of writers that did not record it.
	ChangelogFormat string `json:"changelog_format,omitempty"`
	// Version only grows: a restore of an older checkpoint is a new
	// version whose content equals an older one.
	Version uint64 `json:"version"`
	// EndOffsets holds, per partition of the changelog topic (index =
	// partition = bucket), the Kafka offset just past the last changelog
	// record the version includes: a consumer whose position in every
	// partition is at or past it has read the version whole.
	EndOffsets []int64 `json:"end_offsets"`
	// Writers are the writers of the table (job and sink) and, for each,
	// the checkpoint whose writes the version holds exactly.
	Writers []WriterCheckpoint `json:"writers"`
	// Upstream are, per changelog the writing jobs read, the newest
	// version of it they had consumed completely at their checkpoint.
	Upstream []UpstreamVersion `json:"upstream"`
	// Sources are the Kafka topics other than changelogs that the writing
	// jobs read (lineage: with Upstream, what the version is derived from),
	// sorted; absent when they read none.
	Sources []string `json:"sources,omitempty"`
	// EventTimeMs is the newest source event time the version covers, in
	// milliseconds since the epoch: every on-time input record with an
	// event time at or before it is in the version. For a job reading
	// sources with event time it is its sinks' watermark at the
	// checkpoint; for one reading changelogs, the least event time of the
	// upstream versions it includes; the least over the writers. 0:
	// unknown (docs/CONSISTENCY.md).
	EventTimeMs int64 `json:"event_time_ms"`
	// CommitTime is when the exporter wrote the version, just before it
	// committed the transaction.
	CommitTime time.Time `json:"commit_time"`
}

// WriterCheckpoint is one writer of a version: the writer group
// "<job>/<sink>" (every subtask of the sink), its job, and its checkpoint.
type WriterCheckpoint struct {
	Writer     string `json:"writer"`
	Job        string `json:"job"`
	Checkpoint uint64 `json:"checkpoint"`
}

// UpstreamVersion is a version of an upstream table that a version
// includes completely: the writing job had read every partition of Topic
// at least up to that version's end offsets.
type UpstreamVersion struct {
	Table   string `json:"table"`
	TableID string `json:"table_id"`
	Topic   string `json:"topic"`
	Version uint64 `json:"version"`
	// Exact is true when the checkpoint had read that version and nothing
	// after it (ExactlyAt): the downstream version is derived from exactly
	// that upstream version, which a consistent read needs. Absent (false)
	// when it may hold part of the next one.
	Exact bool `json:"exact,omitempty"`
}

// Covers reports whether positions (topic partition → next offset to
// read) are at or past v's end offsets in every partition of v's topic. A
// partition missing from positions is at offset 0.
func (v *Version) Covers(positions func(partition int32) int64) bool {
	for p, end := range v.EndOffsets {
		if end > 0 && positions(int32(p)) < end {
			return false
		}
	}
	return true
}

// ExactlyAt reports whether positions (as for Covers) are exactly at v's
// end in every partition: at its end offset, or just past the commit
// marker that follows its last record there (a version's end offset in a
// partition is where its last transaction's marker went). A reader there
// has read all of v and none of the next records; one further on may have
// read records of a later version (or only markers and aborted records:
// then it is not told exact, never wrongly told so).
func (v *Version) ExactlyAt(positions func(partition int32) int64) bool {
	for p, end := range v.EndOffsets {
		if at := positions(int32(p)); at != end && (end == 0 || at != end+1) {
			return false
		}
	}
	return true
}

// VersionRecord makes the record of v for topic: value the JSON of v, key
// v.Version mod history in decimal, so that compaction of the topic keeps
// (at least) the newest history versions, and the version headers. The
// record's partition is 0: a versions topic has one.
func VersionRecord(topic string, v *Version, history int) (*kgo.Record, error) {
	if history <= 0 {
		return nil, fmt.Errorf("version record: history %d, want > 0", history)
	}
	out := *v
	out.Format = VersionFormat
	out.CommitTime = v.CommitTime.UTC().Truncate(time.Microsecond)
	if out.EndOffsets == nil {
		out.EndOffsets = []int64{}
	}
	if out.Writers == nil {
		out.Writers = []WriterCheckpoint{}
	}
	if out.Upstream == nil {
		out.Upstream = []UpstreamVersion{}
	}
	val, err := json.Marshal(&out)
	if err != nil {
		return nil, fmt.Errorf("version record: %w", err)
	}
	return &kgo.Record{Topic: topic, Partition: 0,
		Key:   strconv.AppendUint(nil, v.Version%uint64(history), 10),
		Value: val,
		Headers: []kgo.RecordHeader{
			{Key: HeaderRecord, Value: []byte(RecordVersion)},
			{Key: HeaderVersionTable, Value: []byte(v.Table)},
			{Key: HeaderVersionID, Value: []byte(v.TableID)},
			{Key: HeaderVersion, Value: strconv.AppendUint(nil, v.Version, 10)},
			{Key: HeaderVersionFormat, Value: strconv.AppendInt(nil, VersionFormat, 10)},
		}}, nil
}

// DecodeVersion reads a version record. A record without the version
// headers, of a newer format, or whose value does not agree with its
// headers is ErrVersion.
func DecodeVersion(r *kgo.Record) (Version, error) {
	var v Version
	if string(recordHeader(r, HeaderRecord)) != RecordVersion {
		return v, fmt.Errorf("%w: offset %d has no %s=%s header", ErrVersion, r.Offset, HeaderRecord, RecordVersion)
	}
	f, err := strconv.Atoi(string(recordHeader(r, HeaderVersionFormat)))
	if err != nil || f < 1 {
		return v, fmt.Errorf("%w: offset %d: bad %s header %q", ErrVersion, r.Offset, HeaderVersionFormat, recordHeader(r, HeaderVersionFormat))
	}
	if f > VersionFormat {
		return v, fmt.Errorf("%w: offset %d is of format %d, this reader knows up to %d", ErrVersion, r.Offset, f, VersionFormat)
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return v, fmt.Errorf("%w: offset %d: %v", ErrVersion, r.Offset, err)
	}
	if n, err := strconv.ParseUint(string(recordHeader(r, HeaderVersion)), 10, 64); err != nil || n != v.Version || v.Format != f {
		return v, fmt.Errorf("%w: offset %d: headers (version %q, format %d) disagree with the value (version %d, format %d)",
			ErrVersion, r.Offset, recordHeader(r, HeaderVersion), f, v.Version, v.Format)
	}
	return v, nil
}

// SameContent reports whether a and b name the same writer checkpoints,
// upstream versions, sources, event time and end offsets: a version equal to the last one
// published need not be published again.
func (v *Version) SameContent(o *Version) bool {
	return slices.Equal(v.EndOffsets, o.EndOffsets) && slices.Equal(v.Writers, o.Writers) &&
		slices.Equal(v.Upstream, o.Upstream) && v.EventTimeMs == o.EventTimeMs && slices.Equal(v.Sources, o.Sources)
}

func recordHeader(r *kgo.Record, name string) []byte {
	for _, h := range r.Headers {
		if h.Key == name {
			return h.Value
		}
	}
	return nil
}
