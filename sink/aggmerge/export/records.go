package export

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// encoder turns changes into Kafka records of one format.
type encoder struct {
	schema aggmerge.Schema
	table  string
	id     string // the table's identity
	txnID  string // the exporter's transactional id
	codec  changelogfmt.Format
	topic  string
	now    func() time.Time
}

// records appends the records of c, exported from bucket, to dst: one,
// or two for a Debezium delete (the "d" record and its tombstone), all
// with the same headers.
func (e *encoder) records(dst []*kgo.Record, bucket int, c *change) []*kgo.Record {
	s := &e.schema
	en := changelogfmt.Entry{Op: c.op, Key: appendKey(nil, s, c.key)}
	if c.after != nil {
		en.After = appendRow(nil, s, c.key, c.after)
	}
	if e.codec.Envelope() {
		if c.before != nil {
			en.Before = appendRow(nil, s, c.key, c.before)
		}
		en.Source = changelogfmt.Source{Table: e.table, Bucket: bucket, LogOffset: c.offset, Checkpoint: c.checkpoint, Undo: c.undo}
		en.Time = e.now()
	}
	n := len(dst)
	dst = e.codec.Append(dst, &en)
	headers := e.headers(bucket, c)
	for _, r := range dst[n:] {
		r.Topic, r.Partition, r.Headers = e.topic, int32(bucket), headers
	}
	return dst
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
