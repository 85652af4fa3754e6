package encoding

import (
	"encoding/binary"
	"fmt"
)

// Op is the kind of a log record.
type Op uint8

// Record ops. The numbers are stored in tables: never renumber.
const (
	OpInsert Op = 1 // +I
	OpUpdate Op = 2 // -U then +U: two offsets
	OpDelete Op = 3 // -D
	OpMarker Op = 4 // a commit or rollback marker
)

// Offsets returns how many log offsets a record of this op takes.
func (o Op) Offsets() uint64 {
	if o == OpUpdate {
		return 2
	}
	return 1
}

// MarkerKind says what a marker records.
type MarkerKind uint8

// Marker kinds. The numbers are stored in tables: never renumber.
const (
	MarkerCommit   MarkerKind = 1 // a writer's checkpoint covered the log up to here
	MarkerRollback MarkerKind = 2 // the entries in [From, To) were undone
)

// Marker is the payload of a marker record: a checkpoint id and an offset
// range, whose meaning depends on the kind.
type Marker struct {
	Kind       MarkerKind
	Checkpoint uint64
	From, To   uint64
}

// Record is one change in a chunk. Key, Before and After are encoded (Key,
// Row) and alias the decoded chunk; Before is nil for an insert, After nil
// for a delete.
type Record struct {
	Op            Op
	Key           []byte
	Before, After []byte
	Marker        Marker
}

// ChunkHeader is what every record of a chunk shares: they were written by
// one batch.
type ChunkHeader struct {
	Writer string
	Epoch  uint64
	Undo   bool
}

// AppendChunkHeader starts a chunk of n records.
func AppendChunkHeader(dst []byte, h ChunkHeader, n int) []byte {
	dst = append(dst, Version)
	dst = appendString(dst, h.Writer)
	dst = binary.AppendUvarint(dst, h.Epoch)
	var flags byte
	if h.Undo {
		flags |= 1
	}
	dst = append(dst, flags)
	return binary.AppendUvarint(dst, uint64(n))
}

// AppendRecord appends one record to a chunk.
func AppendRecord(dst []byte, r Record) []byte {
	dst = append(dst, byte(r.Op))
	switch r.Op {
	case OpInsert:
		dst = appendBytes(dst, r.Key)
		return appendBytes(dst, r.After)
	case OpUpdate:
		dst = appendBytes(dst, r.Key)
		dst = appendBytes(dst, r.Before)
		return appendBytes(dst, r.After)
	case OpDelete:
		dst = appendBytes(dst, r.Key)
		return appendBytes(dst, r.Before)
	case OpMarker:
		dst = append(dst, byte(r.Marker.Kind))
		dst = binary.AppendUvarint(dst, r.Marker.Checkpoint)
		dst = binary.AppendUvarint(dst, r.Marker.From)
		return binary.AppendUvarint(dst, r.Marker.To)
	}
	panic(fmt.Sprintf("encoding: record op %d", r.Op))
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// DecodeChunk decodes a chunk. The records alias b.
func DecodeChunk(b []byte) (ChunkHeader, []Record, error) {
	d := decoder{b: b}
	if v := d.byte(); v != Version {
		return ChunkHeader{}, nil, corrupt("chunk version %d", v)
	}
	var h ChunkHeader
	h.Writer = d.string()
	h.Epoch = d.uvarint()
	flags := d.byte()
	if flags&^1 != 0 {
		d.fail("chunk flags %#x", flags)
	}
	h.Undo = flags&1 != 0
	n := d.uvarint()
	if n == 0 || n > uint64(len(d.b)) { // every record takes at least two bytes
		d.fail("chunk of %d records in %d bytes", n, len(d.b))
	}
	var recs []Record
	if d.err == nil {
		recs = make([]Record, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		r := Record{Op: Op(d.byte())}
		switch r.Op {
		case OpInsert:
			r.Key, r.After = d.bytes(), d.bytes()
		case OpUpdate:
			r.Key, r.Before, r.After = d.bytes(), d.bytes(), d.bytes()
		case OpDelete:
			r.Key, r.Before = d.bytes(), d.bytes()
		case OpMarker:
			r.Marker.Kind = MarkerKind(d.byte())
			r.Marker.Checkpoint, r.Marker.From, r.Marker.To = d.uvarint(), d.uvarint(), d.uvarint()
			if r.Marker.Kind != MarkerCommit && r.Marker.Kind != MarkerRollback {
				d.fail("marker kind %d", r.Marker.Kind)
			}
		default:
			d.fail("record op %d", r.Op)
		}
		recs = append(recs, r)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing chunk bytes", len(d.b))
	}
	if d.err != nil {
		return ChunkHeader{}, nil, d.err
	}
	return h, recs, nil
}

// ChunkOffsets returns how many offsets the records take.
func ChunkOffsets(recs []Record) uint64 {
	var n uint64
	for _, r := range recs {
		n += r.Op.Offsets()
	}
	return n
}
