package changelogfmt

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/jsonenc"
	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/runtime"
)

// DebeziumJSON is the Debezium JSON envelope. Written: key as in
// UpsertJSON, value = {"before", "after", "op", "ts_ms", "source"} without
// the schema wrapper, one record per change (op "c", "u" or "d"; an
// update's -U and +U become one "u" record with both images), "before"
// always filled on "u" and "d"; each "d" is followed by a tombstone, so
// the topic stays compactable.
//
// Read: the envelope, optionally wrapped in {"schema", "payload"}; op "c"
// and "r" give kafka.ChangeInsert, "u" kafka.ChangeUpdate, "d"
// kafka.ChangeDelete. As in Flink, an update or delete without "before" is
// an error. A null value (the tombstone after a delete) gives
// kafka.ChangeSkip. The key is optional.
var DebeziumJSON Format = debeziumJSON{}

type debeziumJSON struct{}

var errBeforeNeeded = errors.New(`debezium-json: "before" is null on an update or delete (the source must log full before-images)`)

func (debeziumJSON) Name() string { return DebeziumJSONName }

func (debeziumJSON) Envelope() bool { return true }

func (debeziumJSON) Append(dst []kgo.Record, buf []byte, e *Entry) ([]kgo.Record, []byte) {
	n := len(buf)
	buf = appendEnvelope(buf, e)
	dst = append(dst, kgo.Record{Key: e.Key, Value: buf[n:len(buf):len(buf)]})
	if e.Op == runtime.RowDelete {
		dst = append(dst, kgo.Record{Key: e.Key})
	}
	return dst, buf
}

// debeziumOp is the Debezium op code of an exported change.
func debeziumOp(op runtime.RowKind) string {
	switch op {
	case runtime.RowInsert:
		return "c"
	case runtime.RowDelete:
		return "d"
	}
	return "u"
}

// appendEnvelope appends the Debezium envelope of e.
func appendEnvelope(dst []byte, e *Entry) []byte {
	dst = append(dst, `{"before":`...)
	dst = appendImage(dst, e.Before)
	dst = append(dst, `,"after":`...)
	dst = appendImage(dst, e.After)
	dst = append(dst, `,"op":"`...)
	dst = append(dst, debeziumOp(e.Op)...)
	dst = append(dst, `","ts_ms":`...)
	dst = strconv.AppendInt(dst, e.Time.UnixMilli(), 10)
	s := &e.Source
	dst = append(dst, `,"source":{"name":"ebbflow","table":`...)
	dst = jsonenc.AppendString(dst, s.Table)
	dst = append(dst, `,"bucket":`...)
	dst = strconv.AppendInt(dst, int64(s.Bucket), 10)
	dst = append(dst, `,"log_offset":`...)
	dst = strconv.AppendUint(dst, s.LogOffset, 10)
	dst = append(dst, `,"checkpoint_id":`...)
	dst = strconv.AppendUint(dst, s.Checkpoint, 10)
	dst = append(dst, `,"undo":`...)
	dst = strconv.AppendBool(dst, s.Undo)
	return append(dst, "}}"...)
}

func appendImage(dst, row []byte) []byte {
	if row == nil {
		return append(dst, "null"...)
	}
	return append(dst, row...)
}

func (debeziumJSON) Decoder() kafka.Format[kafka.Change] {
	return func() kafka.Decoder[kafka.Change] {
		d := &kafka.RowDecoder{}
		return func(r *kgo.Record) (kafka.Change, error) {
			c, err := decodeKey(d, r)
			if err != nil && !errors.Is(err, errNoKey) {
				return c, err
			}
			c.Record = r
			if r.Value == nil {
				c.Op = kafka.ChangeSkip
				return c, nil
			}
			env, err := d.Decode(r.Value)
			if err != nil {
				return c, fmt.Errorf("debezium-json value: %w", err)
			}
			if p, ok := env.Get("payload"); ok {
				if pr, ok := p.Row(); ok {
					env = pr
				}
			}
			op, _ := env.Get("op")
			s, _ := op.Str()
			before, hasBefore := objectField(env, "before")
			after, hasAfter := objectField(env, "after")
			c.Before, c.After = before, after
			switch s {
			case "c", "r":
				c.Op = kafka.ChangeInsert
				if !hasAfter {
					return c, fmt.Errorf(`debezium-json: op %q without "after"`, s)
				}
			case "u":
				c.Op = kafka.ChangeUpdate
				if !hasAfter {
					return c, fmt.Errorf(`debezium-json: op "u" without "after"`)
				}
				if !hasBefore {
					return c, errBeforeNeeded
				}
			case "d":
				c.Op = kafka.ChangeDelete
				if !hasBefore {
					return c, errBeforeNeeded
				}
			default:
				return c, fmt.Errorf("debezium-json: unknown op %q", s)
			}
			return c, nil
		}
	}
}

// objectField returns the named member of r when it is an object.
func objectField(r kafka.Row, name string) (kafka.Row, bool) {
	v, ok := r.Get(name)
	if !ok {
		return kafka.Row{}, false
	}
	return v.Row()
}
