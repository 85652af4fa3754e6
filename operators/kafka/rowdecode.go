package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/valyala/fastjson"
	"github.com/valyala/fastjson/fastfloat"
)

// Rows decodes JSON object values into Rows with a reused fastjson parser.
// Fields and strings are carved out of chunks shared by the rows of one
// subtask (see Row), and field names are interned, so decoding allocates a
// few times per chunk rather than per record.
func Rows() Format[Row] {
	return func() Decoder[Row] {
		d := &rowDecoder{}
		return func(r *kgo.Record) (Row, error) { return d.decode(r.Value) }
	}
}

// RowDecoder decodes JSON objects into Rows as Rows does, for a format
// that takes a record apart itself (package changelogfmt). Its rows share
// memory with each other (see Row). The zero value is ready; a RowDecoder
// is used by one goroutine.
type RowDecoder struct{ d rowDecoder }

// Decode decodes b, a JSON object.
func (d *RowDecoder) Decode(b []byte) (Row, error) { return d.d.decode(b) }

const (
	fieldChunk = 4096     // fields per chunk
	byteChunk  = 64 << 10 // string bytes per chunk
	maxNames   = 4096     // interned field names
	maxDepth   = 64       // nesting accepted: objects and arrays open at once
)

var (
	errNotObject = errors.New("value is not a JSON object")
	errUTF8      = errors.New("not valid UTF-8")
)

// checkJSON enforces what every JSON format of the source requires beyond
// what its parser checks: UTF-8 text (RFC 8259; a parser would keep invalid
// bytes in strings, or turn them into U+FFFD, and two different keys could
// then look alike) and at most maxDepth levels of nesting. Valid input
// pays for one utf8.Valid and two bytes.Count (vectorized) over the value;
// only a value with more than maxDepth brackets is scanned for its depth.
func checkJSON(b []byte) error {
	if !utf8.Valid(b) {
		at := 0
		for at < len(b) {
			r, n := utf8.DecodeRune(b[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return fmt.Errorf("%w: invalid byte 0x%02x at offset %d", errUTF8, b[at], at)
	}
	if bytes.Count(b, []byte{'{'})+bytes.Count(b, []byte{'['}) <= maxDepth {
		return nil
	}
	depth, str := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case str && c == '\\':
			i++
		case str:
			str = c != '"'
		case c == '"':
			str = true
		case c == '{' || c == '[':
			if depth++; depth > maxDepth {
				return fmt.Errorf("nested deeper than %d levels (at offset %d)", maxDepth, i)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// rowDecoder turns JSON into Rows. Its chunks are only ever appended to:
// memory handed out in a Row is never written again. A oneShot decoder
// (for a single row) allocates exactly what the row needs instead.
type rowDecoder struct {
	oneShot bool
	p       fastjson.Parser
	fields  []Field
	bytes   []byte
	names   map[string]string
	last    []string // top-level names of the previous row, by position
	num     []byte
}

func (d *rowDecoder) decode(b []byte) (Row, error) {
	if err := checkJSON(b); err != nil {
		return Row{}, err
	}
	v, err := d.p.ParseBytes(b)
	if err != nil {
		return Row{}, err
	}
	if v.Type() != fastjson.TypeObject {
		return Row{}, fmt.Errorf("%w (a %s)", errNotObject, v.Type())
	}
	o, _ := v.Object()
	fs, err := d.object(o, 0)
	return Row{fields: fs}, err
}

// take returns n fresh fields from the current chunk.
func (d *rowDecoder) take(n int) []Field {
	if n == 0 {
		return nil
	}
	if d.oneShot {
		return make([]Field, n)
	}
	if cap(d.fields)-len(d.fields) < n {
		d.fields = make([]Field, 0, max(fieldChunk, n))
	}
	at := len(d.fields)
	d.fields = d.fields[:at+n]
	return d.fields[at : at+n : at+n]
}

// str copies b into the current byte chunk.
func (d *rowDecoder) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if d.oneShot {
		return string(b)
	}
	if cap(d.bytes)-len(d.bytes) < len(b) {
		d.bytes = make([]byte, 0, max(byteChunk, len(b)))
	}
	at := len(d.bytes)
	d.bytes = append(d.bytes, b...)
	return unsafe.String(&d.bytes[at], len(b))
}

// name interns a field name.
func (d *rowDecoder) name(b []byte) string {
	if s, ok := d.names[string(b)]; ok {
		return s
	}
	if d.names == nil {
		d.names = make(map[string]string)
	}
	if d.oneShot || len(d.names) >= maxNames {
		return d.str(b)
	}
	s := string(b)
	d.names[s] = s
	return s
}

// object decodes the members of o into fresh (zero) fields. Records of a
// topic mostly share their top-level names in the same order, so those are
// first compared with the previous row's, by position.
func (d *rowDecoder) object(o *fastjson.Object, depth int) ([]Field, error) {
	fs := d.take(o.Len())
	var err error
	i := 0
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch {
		case depth > 0:
			fs[i].Name = d.name(k)
		case i < len(d.last) && d.last[i] == string(k):
			fs[i].Name = d.last[i]
		default:
			fs[i].Name = d.name(k)
			if i < len(d.last) {
				d.last[i] = fs[i].Name
			} else if i == len(d.last) && i < maxNames {
				d.last = append(d.last, fs[i].Name)
			}
		}
		if e := d.value(&fs[i].Value, v, depth); e != nil && err == nil {
			err = e
		}
		i++
	})
	return fs, err
}

// value decodes v into dst, which is fresh: only non-zero fields are
// written (fewer GC write barriers).
func (d *rowDecoder) value(dst *Value, v *fastjson.Value, depth int) error {
	switch v.Type() {
	case fastjson.TypeNull:
	case fastjson.TypeTrue:
		dst.kind, dst.num = Bool, 1
	case fastjson.TypeFalse:
		dst.kind = Bool
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		dst.kind, dst.str = String, d.str(b)
	case fastjson.TypeNumber:
		return d.number(dst, v)
	case fastjson.TypeObject: // checkJSON bounded the depth
		o, _ := v.Object()
		kids, err := d.object(o, depth+1)
		dst.kind, dst.kids = Object, kids
		return err
	case fastjson.TypeArray:
		a, _ := v.Array()
		kids := d.take(len(a))
		for i, e := range a {
			if err := d.value(&kids[i].Value, e, depth+1); err != nil {
				return err
			}
		}
		dst.kind, dst.kids = Array, kids
	}
	return nil
}

func (d *rowDecoder) number(dst *Value, v *fastjson.Value) error {
	d.num = v.MarshalTo(d.num[:0])
	return parseNumber(dst, unsafe.String(unsafe.SliceData(d.num), len(d.num)))
}

// parseNumber sets dst, fresh, to the JSON number s.
func parseNumber(dst *Value, s string) error {
	integral := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			integral = false
			break
		}
	}
	if integral {
		if n, err := fastfloat.ParseInt64(s); err == nil {
			dst.kind, dst.num = Int, uint64(n)
			return nil
		}
	}
	f, err := fastfloat.Parse(s)
	if err == nil && (math.IsInf(f, 0) || math.IsNaN(f)) {
		err = errors.New("out of float64 range")
	}
	if err != nil {
		return fmt.Errorf("number %q: %w", s, err)
	}
	dst.kind, dst.num = Float, math.Float64bits(f)
	return nil
}
