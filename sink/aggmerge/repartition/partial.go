package repartition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/shopspring/decimal"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
	"github.com/ebbflow/ebbflow/sink/aggmerge/writer"
)

// ErrPartial marks a repartition record that is not a partial row of the
// table.
var ErrPartial = errors.New("repartition: not a partial row")

// partialVersion is the first byte of every partial row's value.
const partialVersion = 1

// The headers of the partial rows of a job writing into an owner job's
// table: the job that wrote it and the columns its values are of
// (comma-separated, in the order of the values). A record without them is
// of the job that owns the table, whose stage 1 sends none (as before
// jobs could share a table through the hop).
const (
	HeaderJob     = "ebbflow.job"
	HeaderColumns = "ebbflow.columns"
)

// Codec encodes the partial rows of one job's writer of a table (its
// target columns) as repartition records, and decodes them. Record key:
// the table's encoded primary key (the bytes its bucket is computed from).
// Record value: a version byte, the row kind, the number of values, and
// each value self-described (state, kind, payload), so that a column's
// input (a string for hll, an int for a bitmap) crosses as the mapper
// made it. Record headers: the job and its columns (Headers).
type Codec struct {
	table    *aggmerge.Table
	job      string
	columns  []string // the target columns, in the order of the values
	header   []byte   // HeaderColumns: columns, comma-separated
	keyTypes []agg.Type
}

// NewCodec returns the codec of job's writer of table writing columns
// (empty: all value columns).
func NewCodec(table *aggmerge.Table, job string, columns []string) (*Codec, error) {
	sch := table.Schema()
	if job == "" || strings.Contains(job, ",") {
		return nil, fmt.Errorf("repartition: job name %q", job)
	}
	c := &Codec{table: table, job: job, columns: columns}
	if len(columns) == 0 {
		for _, v := range sch.Values {
			c.columns = append(c.columns, v.Name)
		}
	}
	for _, name := range columns {
		if sch.ValueIndex(name) < 0 || strings.Contains(name, ",") {
			return nil, fmt.Errorf("repartition: table %s has no value column %q", table.Dir(), name)
		}
	}
	for _, k := range sch.Key {
		c.keyTypes = append(c.keyTypes, k.Type)
	}
	c.header = []byte(strings.Join(c.columns, ","))
	return c, nil
}

// Job is the job whose rows the codec carries.
func (c *Codec) Job() string { return c.job }

// Columns are the columns the codec's values are of, in their order.
func (c *Codec) Columns() []string { return c.columns }

// Headers returns the headers of the codec's records: its job and columns.
func (c *Codec) Headers() []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: HeaderJob, Value: []byte(c.job)},
		{Key: HeaderColumns, Value: c.header}}
}

// Buckets is the table's bucket count.
func (c *Codec) Buckets() int { return c.table.Schema().Buckets }

// AppendKey appends the record key of row: its encoded primary key.
func (c *Codec) AppendKey(dst []byte, row *writer.Row) ([]byte, error) {
	return c.table.AppendKey(dst, row.Key)
}

// AppendValue appends the record value of row.
func (c *Codec) AppendValue(dst []byte, row *writer.Row) ([]byte, error) {
	if len(row.Vals) != len(c.columns) {
		return nil, fmt.Errorf("repartition: %d values for %d target columns", len(row.Vals), len(c.columns))
	}
	dst = append(dst, partialVersion, byte(row.Kind))
	return appendValues(dst, row.Vals)
}

// appendValues appends the number of values and each value
// self-described: its state and, when present, its kind and payload.
func appendValues(dst []byte, vals []agg.Value) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(vals)))
	for _, v := range vals {
		dst = append(dst, byte(v.State()))
		if v.IsNull() {
			continue
		}
		dst = append(dst, byte(v.Kind()))
		switch v.Kind() {
		case agg.KindBool:
			dst = append(dst, boolByte(v.Bool()))
		case agg.KindInt64, agg.KindTimestamp:
			dst = binary.AppendVarint(dst, v.Int())
		case agg.KindFloat64:
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Float()))
		case agg.KindDecimal:
			dst = appendString(dst, v.Decimal().String())
		case agg.KindString, agg.KindBytes:
			dst = appendString(dst, v.Str())
		case agg.KindStringSet:
			dst = binary.AppendUvarint(dst, uint64(len(v.Set())))
			for _, e := range v.Set() {
				dst = appendString(dst, e)
			}
		default:
			return nil, fmt.Errorf("repartition: value of kind %s", v.Kind())
		}
	}
	return dst, nil
}

// Decode fills row from a repartition record's key and value, reusing
// row.Key and row.Vals.
func (c *Codec) Decode(key, value []byte, row *writer.Row) error {
	var err error
	if row.Key, err = encoding.DecodeKey(key, c.keyTypes, row.Key[:0]); err != nil {
		return fmt.Errorf("%w: key: %w", ErrPartial, err)
	}
	d := partialDecoder{b: value}
	if v := d.byte(); d.err == nil && v != partialVersion {
		return fmt.Errorf("%w: version %d", ErrPartial, v)
	}
	row.Kind = base.RowKind(d.byte())
	if d.err == nil && row.Kind > base.Delete {
		return fmt.Errorf("%w: row kind %d", ErrPartial, row.Kind)
	}
	row.Vals = d.values(row.Vals[:0], len(c.columns))
	d.end()
	if d.err != nil {
		return fmt.Errorf("%w: %w", ErrPartial, d.err)
	}
	return nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

type partialDecoder struct {
	b   []byte
	err error
}

func (d *partialDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *partialDecoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *partialDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *partialDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *partialDecoder) string() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail("truncated string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// values appends the want values that appendValues wrote.
func (d *partialDecoder) values(dst []agg.Value, want int) []agg.Value {
	if n := d.uvarint(); d.err == nil && n != uint64(want) {
		d.fail("%d values for %d columns", n, want)
	}
	for range want {
		if d.err != nil {
			break
		}
		dst = append(dst, d.value())
	}
	return dst
}

// end fails on bytes left after the last field.
func (d *partialDecoder) end() {
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
}

func (d *partialDecoder) value() agg.Value {
	switch st := agg.State(d.byte()); st {
	case agg.Absent:
		return agg.Value{}
	case agg.Null:
		return agg.NullValue()
	case agg.Present:
	default:
		d.fail("value state %d", st)
		return agg.Value{}
	}
	switch k := agg.Kind(d.byte()); k {
	case agg.KindBool:
		b := d.byte()
		if b > 1 {
			d.fail("bool %d", b)
		}
		return agg.BoolValue(b == 1)
	case agg.KindInt64:
		return agg.IntValue(d.varint())
	case agg.KindTimestamp:
		return agg.MicrosValue(d.varint())
	case agg.KindFloat64:
		if len(d.b) < 8 {
			d.fail("truncated float")
			return agg.Value{}
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
		d.b = d.b[8:]
		return agg.FloatValue(f)
	case agg.KindDecimal:
		s := d.string()
		if d.err != nil {
			return agg.Value{}
		}
		dec, err := decimal.NewFromString(s)
		if err != nil {
			d.fail("decimal %q: %v", s, err)
		}
		return agg.DecimalValue(dec)
	case agg.KindString:
		return agg.StringValue(d.string())
	case agg.KindBytes:
		return agg.BytesValue([]byte(d.string()))
	case agg.KindStringSet:
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			d.fail("set of %d", n)
			return agg.Value{}
		}
		elems := make([]string, 0, n)
		for range n {
			elems = append(elems, d.string())
		}
		return agg.SetValue(elems...)
	default:
		d.fail("value kind %d", k)
		return agg.Value{}
	}
}

// RowMapper fills row from an input record, as the mapper of a writer.To
// sink would; ok false drops the record (a filter). It should reuse
// row.Key and row.Vals.
type RowMapper func(r *kgo.Record, row *writer.Row) (ok bool, err error)

// Sender returns stage 1's mapping of an input record for Writer.Run: the
// row mapper fills the record's row, which is sent, keyed by its encoded
// primary key, to its bucket's partition.
func (c *Codec) Sender(mapper RowMapper) func(r *kgo.Record, send func(key, value []byte)) error {
	var row writer.Row
	return func(r *kgo.Record, send func(key, value []byte)) error {
		if ok, err := mapper(r, &row); !ok || err != nil {
			return err
		}
		// Fresh buffers: the write keeps them until it is done.
		key, err := c.AppendKey(nil, &row)
		if err != nil {
			return err
		}
		val, err := c.AppendValue(nil, &row)
		if err != nil {
			return err
		}
		send(key, val)
		return nil
	}
}
