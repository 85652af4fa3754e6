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
)

// MetaKey returns the key of a metadata entry.
func MetaKey(name string) []byte { return append([]byte{PrefixMeta}, name...) }

// BucketKey returns the key of a bucket's state.
func BucketKey(bucket uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{PrefixBucket}, bucket)
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
// log's start and end offsets, the number of rows, and RowsAt: the stored
// rows hold every change of the log below RowsAt (later changes may be
// stored too), so rows are recovered by replaying the log from RowsAt.
type BucketState struct {
	LogStart, LogEnd uint64
	Rows             uint64
	RowsAt           uint64
}

// AppendBucketState encodes a bucket state.
func AppendBucketState(dst []byte, s BucketState) []byte {
	dst = append(dst, Version)
	dst = binary.AppendUvarint(dst, s.LogStart)
	dst = binary.AppendUvarint(dst, s.LogEnd)
	dst = binary.AppendUvarint(dst, s.Rows)
	return binary.AppendUvarint(dst, s.RowsAt)
}

// DecodeBucketState decodes a bucket state.
func DecodeBucketState(b []byte) (BucketState, error) {
	d := decoder{b: b}
	if v := d.byte(); v != Version {
		return BucketState{}, corrupt("bucket state version %d", v)
	}
	s := BucketState{LogStart: d.uvarint(), LogEnd: d.uvarint(), Rows: d.uvarint(), RowsAt: d.uvarint()}
	if d.err == nil && (len(d.b) != 0 || s.LogStart > s.LogEnd || s.RowsAt > s.LogEnd) {
		d.fail("bad bucket state")
	}
	return s, d.err
}
