package export

import (
	"github.com/ebbflow/ebbflow/internal/jsonenc"
	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Format is the wire format of the changelog topic, the name of a format
// of package changelogfmt, which writes and reads it.
type Format string

// The formats (see changelogfmt.UpsertJSON and changelogfmt.DebeziumJSON).
const (
	// UpsertJSON: key = the primary key as a JSON object, value = the full
	// row (key and value columns) as a JSON object, a delete is a tombstone
	// (null value). Updates carry only the new row: the -U half of an update
	// is not written. The topic is compactable.
	UpsertJSON Format = changelogfmt.UpsertJSONName
	// DebeziumJSON: key as in UpsertJSON, value = {"before", "after", "op",
	// "ts_ms", "source"} without the schema wrapper, one record per change
	// (op "c", "u" or "d"; an update's -U and +U become one "u" record with
	// both images), "before" always filled on "u" and "d"; each "d" is
	// followed by a tombstone with the same headers, so the topic stays
	// compactable.
	DebeziumJSON Format = changelogfmt.DebeziumJSONName
)

// codec returns the changelogfmt format called f.
func (f Format) codec() (changelogfmt.Format, error) { return changelogfmt.Lookup(string(f)) }

// Record header names. Every exported record carries all of them.
const (
	HeaderTable      = "ebbflow.table"      // the table's name (Config.Name)
	HeaderTableID    = "ebbflow.table_id"   // the table's identity (a UUID; a recreated table has a new one)
	HeaderBucket     = "ebbflow.bucket"     // decimal bucket number = partition
	HeaderOffset     = "ebbflow.log_offset" // decimal log offset of the entry (+U's for an update; committed: of the key's last in the range, see the package doc)
	HeaderCheckpoint = "ebbflow.checkpoint" // decimal id of the checkpoint that committed it (0: unknown, uncommitted mode)
	HeaderUndo       = "ebbflow.undo"       // "true" for an entry written by undo
	HeaderOp         = "ebbflow.op"         // +I, +U or -D
	// HeaderTransactionalID is the transactional id of the exporter that
	// wrote the record: a newcomer on a topic names the owner it refuses.
	HeaderTransactionalID = "ebbflow.transactional_id"
	// HeaderResume is the exporter's own restart point for the bucket: the
	// log offset it re-reads from after a crash. Consumers ignore it.
	HeaderResume = "ebbflow.resume"
)

// change is one change as exported: Insert, UpdateAfter or Delete, with the
// images a consumer sees (nil: no row).
type change struct {
	op            aggmerge.ChangeOp
	offset        uint64
	key           []agg.Value
	before, after []agg.Value
	checkpoint    uint64
	undo          bool
	resume        uint64
}

// appendKey appends the primary key as a JSON object, columns in schema order.
func appendKey(dst []byte, s *aggmerge.Schema, key []agg.Value) []byte {
	dst = append(dst, '{')
	for i, c := range s.Key {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonenc.AppendString(dst, c.Name)
		dst = append(dst, ':')
		dst = agg.AppendJSON(dst, key[i])
	}
	return append(dst, '}')
}

// appendRow appends the full row (key then value columns) as a JSON object.
func appendRow(dst []byte, s *aggmerge.Schema, key, vals []agg.Value) []byte {
	dst = appendKey(dst, s, key)
	dst = dst[:len(dst)-1]
	for i, c := range s.Values {
		dst = append(dst, ',')
		dst = jsonenc.AppendString(dst, c.Name)
		dst = append(dst, ':')
		dst = agg.AppendJSON(dst, vals[i])
	}
	return append(dst, '}')
}

// TimeLayout is how timestamps are written (agg.TimeLayout).
const TimeLayout = agg.TimeLayout
