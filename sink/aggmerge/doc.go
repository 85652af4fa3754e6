// Package aggmerge is the aggregation-merge table: primary-key rows whose
// value columns aggregate (sum, max, last_value, … see package agg), split
// into a fixed number of buckets, each bucket with a changelog of +I, -U,
// +U and -D entries carrying full before- and after-images. The exactly-once
// writer, undo and the changelog exporter build on it.
//
// Storage: one pebble DB per table (see package encoding for the layout):
// metadata (schema, table UUID), per-bucket state (log start and end, row
// count), rows, and log chunks. A chunk holds the entries one Apply
// appended to one bucket, under the key (bucket, first offset), so the log
// costs one pebble key per bucket per batch rather than one per entry, and a
// bucket's log is read in order by one iterator. The log lives in the same
// DB as the rows: one pebble batch then commits rows, log and bucket state
// together, with no cross-DB recovery protocol.
//
// Writes: Table.Apply takes a Batch of upserts and deletes, each in a mode
// (Aggregate, Overwrite, Retract), naming its target columns once (partial
// update). It reads each old row from the write-through row cache (pebble
// only on a miss in a cache that does not hold the whole table), merges,
// and commits unsynced by default; Table.Sync makes everything so far
// durable. Writers may register (Register): a registered writer's batches
// of an older epoch are fenced, and two jobs cannot register overlapping
// target columns.
//
// Invariants:
//   - rows and log never disagree: replaying a bucket's log from its first
//     entry reproduces its rows, also after a SIGKILL (writes are atomic per
//     batch; an unsynced batch is either wholly there or wholly gone);
//   - offsets are dense and increasing per bucket; an update takes two
//     (-U, +U); a write that leaves its row unchanged appends nothing;
//   - bucket = xxhash64(encoded primary key) mod buckets (BucketOf);
//   - the row cache is filled only by the writer after its commit, so it is
//     never older than pebble;
//   - writers are serialized; readers (Get, Scan, ReadLog) never wait for
//     a writer's IO and each sees one consistent snapshot;
//   - Truncate never drops an entry at or above the offset it is given.
package aggmerge
