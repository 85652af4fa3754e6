package changelogfmt

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// The format names, as configured (export.Config.Format, a YAML source's
// format).
const (
	UpsertJSONName   = "upsert-json"
	DebeziumJSONName = "debezium-json"
)

// Format is one changelog format, both directions.
type Format interface {
	// Name is the format's configured name.
	Name() string
	// Append appends the records of e to dst: one, or two for a format
	// that follows a delete with a tombstone. Only Key and Value are set;
	// the caller adds topic, partition and headers. The records may share
	// e's slices; a value Append writes is appended to buf, and the grown
	// buf returned (a writer keeps one buffer for many records: Append
	// never writes into what buf held before).
	Append(dst []kgo.Record, buf []byte, e *Entry) ([]kgo.Record, []byte)
	// Envelope reports whether Append writes an envelope that carries
	// Entry.Before, Source and Time; when not, it reads only Op, Key and
	// After, and a caller may leave the rest unset.
	Envelope() bool
	// Decoder decodes records of the format, for a kafka.Source or a
	// reader.
	Decoder() kafka.Format[kafka.Change]
}

// formats are the known formats, in the order they are documented.
var formats = []Format{UpsertJSON, DebeziumJSON}

// Lookup returns the format called name.
func Lookup(name string) (Format, error) {
	for _, f := range formats {
		if f.Name() == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("unknown format %q (want %s or %s)", name, UpsertJSONName, DebeziumJSONName)
}

// Entry is one change as the exporter writes it.
type Entry struct {
	// Op is runtime.RowInsert, runtime.RowUpdateAfter (an update: the +U
	// carries both images, its -U is not written) or runtime.RowDelete.
	Op runtime.RowKind
	// Key is the primary key as a JSON object: the record key.
	Key []byte
	// Before and After are the full rows (key and value columns) as JSON
	// objects, nil when there is none (no Before on an insert, no After on
	// a delete).
	Before, After []byte
	// Source says where the change comes from (debezium-json's "source").
	Source Source
	// Time is when it is written (debezium-json's "ts_ms").
	Time time.Time
}

// Source is where an exported change comes from.
type Source struct {
	Table      string // the table's name
	Bucket     int    // its bucket (the partition)
	LogOffset  uint64 // the entry's offset in the table's log
	Checkpoint uint64 // the checkpoint that committed it (0: unknown)
	Undo       bool   // written by undo
}

var errNoKey = errors.New("changelog record has no key")

func decodeKey(d *kafka.RowDecoder, r *kgo.Record) (kafka.Change, error) {
	if r.Key == nil {
		return kafka.Change{}, errNoKey
	}
	k, err := d.Decode(r.Key)
	if err != nil {
		return kafka.Change{}, fmt.Errorf("changelog key: %w", err)
	}
	return kafka.Change{RawKey: r.Key, Key: k}, nil
}
