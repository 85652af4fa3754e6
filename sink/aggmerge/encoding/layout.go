package encoding

import (
	"encoding/binary"
	"fmt"
)

// Key prefixes of the pebble keyspace.
const (
	PrefixMeta   byte = 'm'
	PrefixBucket byte = 'b'
	PrefixRow    byte = 'r'
	PrefixLog    byte = 'l'
	PrefixRowsAt byte = 'a'
)

// MetaKey returns the key of a metadata entry.
func MetaKey(name string) []byte { return append([]byte{PrefixMeta}, name...) }

// BucketKey returns the key of a bucket's state.
func BucketKey(bucket uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{PrefixBucket}, bucket)
}

// RowsAtKey returns the key of a bucket's rows offset: the stored rows hold
// every change of the bucket's log below it. Its value is a version byte
// and a uvarint.
func RowsAtKey(bucket uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{PrefixRowsAt}, bucket)
}

// AppendRowsAt encodes a rows offset.
func AppendRowsAt(dst []byte, offset uint64) []byte {
	return binary.AppendUvarint(append(dst, Version), offset)
}

// DecodeRowsAt decodes a rows offset.
func DecodeRowsAt(b []byte) (uint64, error) {
	d := decoder{b: b}
	if v := d.byte(); v != Version {
		return 0, corrupt("rows offset version %d", v)
	}
	off := d.uvarint()
	if d.err == nil && len(d.b) != 0 {
		d.fail("bad rows offset")
	}
	return off, d.err
}

// RowPrefix returns the prefix of a bucket's row keys.
func RowPrefix(dst []byte, bucket uint32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, PrefixRow), bucket)
}

// LogKey returns the key of the log chunk of a bucket starting at offset.
func LogKey(bucket uint32, offset uint64) []byte {
	k := make([]byte, 13)
	k[0] = PrefixLog
	binary.BigEndian.PutUint32(k[1:], bucket)
	binary.BigEndian.PutUint64(k[5:], offset)
	return k
}

// ParseLogKey returns the first offset of a chunk from its key.
func ParseLogKey(k []byte) (bucket uint32, offset uint64, err error) {
	if len(k) != 13 || k[0] != PrefixLog {
		return 0, 0, fmt.Errorf("%w: log key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint32(k[1:]), binary.BigEndian.Uint64(k[5:]), nil
}

// BucketState is what the table keeps per bucket besides rows and log: the
// log's start and end offsets and the number of rows.
type BucketState struct {
	LogStart, LogEnd uint64
	Rows             uint64
}

// AppendBucketState encodes a bucket state.
func AppendBucketState(dst []byte, s BucketState) []byte {
	dst = append(dst, Version)
	dst = binary.AppendUvarint(dst, s.LogStart)
	dst = binary.AppendUvarint(dst, s.LogEnd)
	return binary.AppendUvarint(dst, s.Rows)
}

// DecodeBucketState decodes a bucket state.
func DecodeBucketState(b []byte) (BucketState, error) {
	d := decoder{b: b}
	if v := d.byte(); v != Version {
		return BucketState{}, corrupt("bucket state version %d", v)
	}
	s := BucketState{LogStart: d.uvarint(), LogEnd: d.uvarint(), Rows: d.uvarint()}
	if d.err == nil && (len(d.b) != 0 || s.LogStart > s.LogEnd) {
		d.fail("bad bucket state")
	}
	return s, d.err
}
