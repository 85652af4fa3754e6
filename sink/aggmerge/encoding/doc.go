// Package encoding is the binary format of the aggregation-merge table: the
// primary-key encoding, the row encoding, the log chunk encoding and the
// layout of pebble keys. It performs no IO.
//
// Every encoded key, row and chunk starts with a version byte (Version).
// Decoders take untrusted bytes: corrupt input gives an error wrapping
// ErrCorrupt, never a panic (the fuzz tests check this).
//
// Primary key (Key): version, then each key column in order:
//
//	bool       1 byte (0 or 1)
//	int64      8 bytes big-endian with the sign bit flipped (sorts as numbers)
//	timestamp  as int64 (microseconds since the Unix epoch)
//	float64    8 bytes big-endian, order-preserving transform of the bits
//	decimal    sign byte (0 negative, 1 zero or positive) + uvarint length +
//	           big-endian magnitude of the unscaled coefficient
//	string     uvarint length + bytes
//	bytes      uvarint length + bytes
//
// A key never holds nulls. The encoding of the first k columns is a prefix
// of the encoding of the whole key, so a prefix scan by leading columns is a
// byte-prefix scan.
//
// Row (Row): version, then for each value column a state byte (0 absent,
// 1 null, 2 present, 3 present big decimal) and, when present:
//
//	bool       1 byte
//	int64      zigzag varint
//	timestamp  zigzag varint
//	float64    8 bytes little-endian IEEE 754
//	decimal    zigzag varint unscaled coefficient (state 2) or, when it does
//	           not fit in int64, sign byte + uvarint length + magnitude (3)
//	string     uvarint length + bytes (also bytes)
//	set        uvarint count + count × (uvarint length + bytes), sorted unique
//
// The scale of a decimal is the column's, so it is not stored.
//
// Pebble keys: 'm' + name (metadata), 'b' + bucket (bucket state),
// 'a' + bucket (rows offset: version, uvarint),
// 'r' + bucket + Key (rows), 'l' + bucket + first offset (log chunks);
// bucket is 4 bytes and offsets 8 bytes, big-endian, so a bucket's rows sort
// together and its log chunks sort by offset.
//
// Log chunk (Chunk): the entries one write batch appended to one bucket.
// version, writer id (uvarint length + bytes), epoch (uvarint), flags (bit 0:
// undo), record count (uvarint), then each record: op byte and
//
//	insert  key, after            (one offset: +I)
//	update  key, before, after    (two offsets: -U then +U)
//	delete  key, before           (one offset: -D)
//	marker  kind byte, checkpoint, from, to (uvarints; one offset)
//
// where key and images are uvarint length + encoded Key or Row.
package encoding
