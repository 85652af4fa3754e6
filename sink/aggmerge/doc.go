// Package aggmerge is the aggregation-merge table: primary-key rows whose
// value columns aggregate (sum, max, last_value, … see package agg), split
// into a fixed number of buckets, each bucket with a changelog of +I, -U,
// +U and -D entries carrying full before- and after-images. The exactly-once
// writer, undo and the changelog exporter build on it.
//
// Storage: one pebble DB per table (see package encoding for the layout):
// metadata (schema, table UUID), per-bucket state (log start and end, row
// count), per-bucket rows offset (up to where the stored rows are
// complete), rows, and log chunks. A chunk holds the entries one Apply
// appended to one bucket, under the key (bucket, first offset), so the log
// costs one pebble key per bucket per batch rather than one per entry, and a
// bucket's log is read in order by one iterator. The log lives in the same
// DB as the rows, so one pebble batch commits log and bucket state and one
// WAL orders them with the stored rows, with no cross-DB recovery protocol.
// Rows are stored lazily (rows.go): an Apply leaves them dirty in the row
// cache, a background storer stores them after each Sync (each checkpoint),
// Scan, Truncate and Close store them at once, and Open replays the log
// from the rows offset: the log is the truth.
//
// Writes: Table.Apply takes a Batch of upserts and deletes, each in a mode
// (Aggregate, Overwrite, Retract), naming its target columns once (partial
// update). It reads each old row from the row cache (pebble only on a miss
// in a cache that does not hold the whole table, of a key that the key
// filter, keys.go, says the table may hold), merges,
// and commits unsynced by default; Table.Sync makes everything so far
// durable. Table.Load bulk-loads a bucket that holds no row (a handover's
// rebuild): the same Insert entries as Overwrite upserts would make, with
// the rows stored in the same pebble batch and no old-row lookup; the
// bucket's cache misses then read pebble (unless the key filter has not
// the key). Writers may register (Register):
// a registered writer's batches of an older epoch are fenced, and two jobs
// cannot register overlapping target columns.
//
// Invariants:
//   - rows and log never disagree: replaying a bucket's log from its first
//     entry reproduces its rows, also after a SIGKILL (writes are atomic per
//     batch; an unsynced batch is either wholly there or wholly gone);
//   - offsets are dense and increasing per bucket; an update takes two
//     (-U, +U); a write that leaves its row unchanged appends nothing;
//   - bucket = xxhash64(encoded primary key) mod buckets (BucketOf);
//   - the row cache is changed only by the writer after its commit, so it
//     is never older than pebble, and it holds every dirty row until it is
//     stored;
//   - the key filter, once built, has the key of every row (the
//     invariants tag checks each "absent" it answers against pebble);
//   - the stored rows hold every change of a bucket's log below its rows
//     offset, and a row being stored is never evicted before it is;
//   - writers are serialized; Get and ReadLog never wait for a writer's IO
//     (Scan waits for the dirty rows to be stored) and each read sees one
//     consistent snapshot;
//   - Truncate never drops an entry at or above the offset it is given.
package aggmerge
