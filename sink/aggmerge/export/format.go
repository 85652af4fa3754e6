package export

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Format is the wire format of the changelog topic.
type Format string

// The formats.
const (
	// UpsertJSON: key = the primary key as a JSON object, value = the full
	// row (key and value columns) as a JSON object, a delete is a tombstone
	// (null value). Updates carry only the new row: the -U half of an update
	// is not written. The topic is compactable.
	UpsertJSON Format = "upsert-json"
	// DebeziumJSON: key as in UpsertJSON, value = {"before", "after", "op",
	// "ts_ms", "source"} without the schema wrapper, one record per change
	// (op "c", "u" or "d"; an update's -U and +U become one "u" record with
	// both images), "before" always filled on "u" and "d"; each "d" is
	// followed by a tombstone with the same headers, so the topic stays
	// compactable.
	DebeziumJSON Format = "debezium-json"
)

// Record header names. Every exported record carries all of them.
const (
	HeaderTable      = "ebbflow.table"      // the table's name (Config.Name)
	HeaderTableID    = "ebbflow.table_id"   // the table's identity (a UUID; a recreated table has a new one)
	HeaderBucket     = "ebbflow.bucket"     // decimal bucket number = partition
	HeaderOffset     = "ebbflow.log_offset" // decimal log offset of the entry (+U's for an update)
	HeaderCheckpoint = "ebbflow.checkpoint" // decimal id of the checkpoint that committed it (0: unknown, uncommitted mode)
	HeaderUndo       = "ebbflow.undo"       // "true" for an entry written by undo
	HeaderOp         = "ebbflow.op"         // +I, +U or -D
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
		dst = appendString(dst, c.Name)
		dst = append(dst, ':')
		dst = appendValue(dst, key[i])
	}
	return append(dst, '}')
}

// appendRow appends the full row (key then value columns) as a JSON object.
func appendRow(dst []byte, s *aggmerge.Schema, key, vals []agg.Value) []byte {
	dst = appendKey(dst, s, key)
	dst = dst[:len(dst)-1]
	for i, c := range s.Values {
		dst = append(dst, ',')
		dst = appendString(dst, c.Name)
		dst = append(dst, ':')
		dst = appendValue(dst, vals[i])
	}
	return append(dst, '}')
}

// TimeLayout is how timestamps are written: RFC 3339 in UTC with exactly
// six fractional digits (microseconds, the table's precision).
const TimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// appendValue appends one value: null (absent or null), true/false, int64
// and float64 as JSON numbers, decimal as a string (exact digits, the
// column's scale), string, bytes as standard base64 with padding, timestamp
// as TimeLayout, set<string> as an array of strings.
func appendValue(dst []byte, v agg.Value) []byte {
	if v.IsNull() {
		return append(dst, "null"...)
	}
	switch v.Kind() {
	case agg.KindBool:
		return strconv.AppendBool(dst, v.Bool())
	case agg.KindInt64:
		return strconv.AppendInt(dst, v.Int(), 10)
	case agg.KindFloat64:
		f := v.Float()
		if math.IsInf(f, 0) || math.IsNaN(f) { // never stored; keep the JSON valid anyway
			return append(dst, "null"...)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	case agg.KindDecimal:
		d := v.Decimal() // conformed: its exponent is minus the column's scale
		dst = append(dst, '"')
		dst = append(dst, d.StringFixed(max(-d.Exponent(), 0))...)
		return append(dst, '"')
	case agg.KindString:
		return appendString(dst, v.Str())
	case agg.KindBytes:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.Bytes())
		return append(dst, '"')
	case agg.KindTimestamp:
		dst = append(dst, '"')
		dst = v.Time().AppendFormat(dst, TimeLayout)
		return append(dst, '"')
	case agg.KindStringSet:
		dst = append(dst, '[')
		for i, s := range v.Set() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, s)
		}
		return append(dst, ']')
	}
	panic(fmt.Sprintf("export: value of kind %s", v.Kind()))
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// debeziumOp is the Debezium op code of a change.
func debeziumOp(op aggmerge.ChangeOp) string {
	switch op {
	case aggmerge.Insert:
		return "c"
	case aggmerge.Delete:
		return "d"
	}
	return "u"
}

// appendDebezium appends the Debezium envelope of c.
func appendDebezium(dst []byte, s *aggmerge.Schema, table string, bucket int, c *change, now time.Time) []byte {
	dst = append(dst, `{"before":`...)
	if c.before == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendRow(dst, s, c.key, c.before)
	}
	dst = append(dst, `,"after":`...)
	if c.after == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendRow(dst, s, c.key, c.after)
	}
	dst = append(dst, `,"op":"`...)
	dst = append(dst, debeziumOp(c.op)...)
	dst = append(dst, `","ts_ms":`...)
	dst = strconv.AppendInt(dst, now.UnixMilli(), 10)
	dst = append(dst, `,"source":{"name":"ebbflow","table":`...)
	dst = appendString(dst, table)
	dst = append(dst, `,"bucket":`...)
	dst = strconv.AppendInt(dst, int64(bucket), 10)
	dst = append(dst, `,"log_offset":`...)
	dst = strconv.AppendUint(dst, c.offset, 10)
	dst = append(dst, `,"checkpoint_id":`...)
	dst = strconv.AppendUint(dst, c.checkpoint, 10)
	dst = append(dst, `,"undo":`...)
	dst = strconv.AppendBool(dst, c.undo)
	return append(dst, "}}"...)
}
