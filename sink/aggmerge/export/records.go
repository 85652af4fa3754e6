package export

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// encoder turns changes into Kafka records of one format.
type encoder struct {
	schema aggmerge.Schema
	table  string
	id     string // the table's identity
	txnID  string // the exporter's transactional id
	format Format
	topic  string
	now    func() time.Time
}

// records appends the records of c, exported from bucket, to dst: one,
// or two for a Debezium delete (the "d" record and its tombstone).
func (e *encoder) records(dst []*kgo.Record, bucket int, c *change) []*kgo.Record {
	s := &e.schema
	r := &kgo.Record{Topic: e.topic, Partition: int32(bucket), Key: appendKey(nil, s, c.key), Headers: e.headers(bucket, c)}
	switch e.format {
	case DebeziumJSON:
		r.Value = appendDebezium(nil, s, e.table, bucket, c, e.now())
		dst = append(dst, r)
		if c.op == aggmerge.Delete {
			dst = append(dst, &kgo.Record{Topic: e.topic, Partition: int32(bucket), Key: r.Key, Headers: r.Headers})
		}
		return dst
	default:
		if c.op != aggmerge.Delete {
			r.Value = appendRow(nil, s, c.key, c.after)
		}
		return append(dst, r)
	}
}

func (e *encoder) headers(bucket int, c *change) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderTable, Value: []byte(e.table)},
		{Key: HeaderTableID, Value: []byte(e.id)},
		{Key: HeaderBucket, Value: strconv.AppendInt(nil, int64(bucket), 10)},
		{Key: HeaderOffset, Value: strconv.AppendUint(nil, c.offset, 10)},
		{Key: HeaderCheckpoint, Value: strconv.AppendUint(nil, c.checkpoint, 10)},
		{Key: HeaderUndo, Value: strconv.AppendBool(nil, c.undo)},
		{Key: HeaderOp, Value: []byte(c.op.String())},
		{Key: HeaderResume, Value: strconv.AppendUint(nil, c.resume, 10)},
		{Key: HeaderTransactionalID, Value: []byte(e.txnID)},
	}
}

// header returns the value of the named header of r, or nil.
func header(r *kgo.Record, name string) []byte {
	for _, h := range r.Headers {
		if h.Key == name {
			return h.Value
		}
	}
	return nil
}

// uintHeader parses a decimal header; ok is false when it is absent or not
// a number.
func uintHeader(r *kgo.Record, name string) (uint64, bool) {
	v, err := strconv.ParseUint(string(header(r, name)), 10, 64)
	return v, err == nil
}
