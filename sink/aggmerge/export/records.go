package export

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/operators/kafka/changelogfmt"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// encoder turns changes into Kafka records of one format. It hands out
// records, headers and bytes from chunks it allocates (see room): the
// records of a transaction stay untouched until it ends, when the chunks
// are left to the garbage collector, so a record costs no allocation of
// its own.
type encoder struct {
	schema aggmerge.Schema
	table  string
	id     string // the table's identity
	txnID  string // the exporter's transactional id
	codec  changelogfmt.Format
	topic  string
	now    func() time.Time

	buf   []byte             // the records' keys, values and header values
	recs  []kgo.Record       // records to hand out
	hdrs  []kgo.RecordHeader // headers to hand out
	fixed []kgo.RecordHeader // the headers every record carries alike
	names [][]byte           // per bucket, its decimal number
	// entry is the entry encoded: a local passed to the codec would move
	// to the heap.
	entry changelogfmt.Entry
}

// The sizes of the chunks an encoder allocates.
const (
	chunkBytes   = 64 << 10
	chunkRecords = 256
)

// The header values records share.
var (
	trueValue   = []byte("true")
	falseValue  = []byte("false")
	insertValue = []byte(aggmerge.Insert.String())
	updateValue = []byte(aggmerge.UpdateAfter.String())
	deleteValue = []byte(aggmerge.Delete.String())
)

func opValue(op aggmerge.ChangeOp) []byte {
	switch op {
	case aggmerge.Insert:
		return insertValue
	case aggmerge.UpdateAfter:
		return updateValue
	case aggmerge.Delete:
		return deleteValue
	}
	return []byte(op.String())
}

// room makes sure the chunks have room for one more change.
func (e *encoder) room() {
	if cap(e.buf)-len(e.buf) < chunkBytes/4 {
		e.buf = make([]byte, 0, chunkBytes)
	}
	if cap(e.recs)-len(e.recs) < 2 {
		e.recs = make([]kgo.Record, 0, chunkRecords)
	}
	if cap(e.hdrs)-len(e.hdrs) < numHeaders {
		e.hdrs = make([]kgo.RecordHeader, 0, chunkRecords*numHeaders)
	}
	if e.fixed == nil {
		e.fixed = []kgo.RecordHeader{
			{Key: HeaderTable, Value: []byte(e.table)},
			{Key: HeaderTableID, Value: []byte(e.id)},
			{Key: HeaderTransactionalID, Value: []byte(e.txnID)},
		}
	}
}

// bytes returns what was appended to e.buf from n on, its capacity capped
// so that nobody appends into the chunk through it.
func (e *encoder) bytes(n int) []byte { return e.buf[n:len(e.buf):len(e.buf)] }

// records appends the records of c, exported from bucket, to dst: one,
// or two for a Debezium delete (the "d" record and its tombstone), all
// with the same headers.
func (e *encoder) records(dst []*kgo.Record, bucket int, c *change) []*kgo.Record {
	e.room()
	s := &e.schema
	n := len(e.buf)
	e.buf = appendKey(e.buf, s, c.key)
	en := &e.entry
	*en = changelogfmt.Entry{Op: c.op, Key: e.bytes(n)}
	if c.after != nil {
		n = len(e.buf)
		e.buf = appendRow(e.buf, s, c.key, c.after)
		en.After = e.bytes(n)
	}
	if e.codec.Envelope() {
		if c.before != nil {
			n = len(e.buf)
			e.buf = appendRow(e.buf, s, c.key, c.before)
			en.Before = e.bytes(n)
		}
		en.Source = changelogfmt.Source{Table: e.table, Bucket: bucket, LogOffset: c.offset, Checkpoint: c.checkpoint, Undo: c.undo}
		en.Time = e.now()
	}
	first := len(e.recs)
	e.recs, e.buf = e.codec.Append(e.recs, e.buf, en)
	headers := e.headers(bucket, c)
	for i := first; i < len(e.recs); i++ {
		r := &e.recs[i]
		r.Topic, r.Partition, r.Headers = e.topic, int32(bucket), headers
		dst = append(dst, r)
	}
	return dst
}

// numHeaders is the number of headers of a record.
const numHeaders = 9

func (e *encoder) headers(bucket int, c *change) []kgo.RecordHeader {
	for len(e.names) <= bucket {
		e.names = append(e.names, strconv.AppendInt(nil, int64(len(e.names)), 10))
	}
	num := func(v uint64) []byte {
		n := len(e.buf)
		e.buf = strconv.AppendUint(e.buf, v, 10)
		return e.bytes(n)
	}
	undo := falseValue
	if c.undo {
		undo = trueValue
	}
	h := len(e.hdrs)
	e.hdrs = append(e.hdrs,
		e.fixed[0],
		e.fixed[1],
		kgo.RecordHeader{Key: HeaderBucket, Value: e.names[bucket]},
		kgo.RecordHeader{Key: HeaderOffset, Value: num(c.offset)},
		kgo.RecordHeader{Key: HeaderCheckpoint, Value: num(c.checkpoint)},
		kgo.RecordHeader{Key: HeaderUndo, Value: undo},
		kgo.RecordHeader{Key: HeaderOp, Value: opValue(c.op)},
		kgo.RecordHeader{Key: HeaderResume, Value: num(c.resume)},
		e.fixed[2],
	)
	return e.hdrs[h:len(e.hdrs):len(e.hdrs)]
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

// Encoder writes committed changes of a table's rows as changelog records,
// for a publisher other than the Exporter: the bucket owners of a scaled
// table with dynamic ownership commit them in their owner log's
// transactions (package repartition). The records are those the Exporter
// writes, every header included.
type Encoder struct{ enc encoder }

// EncoderConfig says what an Encoder writes.
type EncoderConfig struct {
	Schema          aggmerge.Schema
	Table           string // the table's name (HeaderTable)
	TableID         string // the identity of the table the changes are read from (HeaderTableID)
	TransactionalID string // of the producer of the records (HeaderTransactionalID)
	Topic           string
	Format          Format           // UpsertJSON when empty
	Now             func() time.Time // Debezium's ts_ms (time.Now when nil)
}

// NewEncoder returns the encoder of cfg.
func NewEncoder(cfg EncoderConfig) (*Encoder, error) {
	if cfg.Format == "" {
		cfg.Format = UpsertJSON
	}
	codec, err := cfg.Format.codec()
	if err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Encoder{enc: encoder{schema: cfg.Schema, table: cfg.Table, id: cfg.TableID, txnID: cfg.TransactionalID,
		codec: codec, topic: cfg.Topic, now: cfg.Now}}, nil
}

// RowChange is a committed change of a row, as a consumer sees it: Before
// nil is an insert, After nil a delete.
type RowChange struct {
	Key, Before, After []agg.Value
	// Offset is the table log offset of the row's last change, Checkpoint
	// the checkpoint that committed it.
	Offset, Checkpoint uint64
}

// Append appends to dst the records of c, a change of a row of bucket (the
// topic's partition): one, or two for a Debezium delete. Their bytes are
// never reused.
func (e *Encoder) Append(dst []*kgo.Record, bucket int, c RowChange) []*kgo.Record {
	ch := change{op: aggmerge.UpdateAfter, offset: c.Offset, key: c.Key, before: c.Before, after: c.After,
		checkpoint: c.Checkpoint, resume: c.Offset}
	switch {
	case c.Before == nil:
		ch.op = aggmerge.Insert
	case c.After == nil:
		ch.op = aggmerge.Delete
	}
	return e.enc.records(dst, bucket, &ch)
}
