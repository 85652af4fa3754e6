// Package writer is the exactly-once writer of an aggregation-merge table: a
// runtime sink whose writes are undone past its last checkpoint.
//
// The protocol, for a sink with parallelism p writing a table of B buckets:
//
//   - Ownership: the sink's input is partitioned by bucket and subtask i owns
//     the buckets b with b mod p = i (Owner). The same function decides the
//     shuffle, the baselines a subtask records and restores, and undo, so a
//     bucket always has exactly one writer of this sink, also after a rescale.
//     The Mapper runs once per record, before the shuffle, and its bucket,
//     encoded key and values travel together (in chunked arenas, not one
//     allocation per record): a record is written under the key it was
//     routed by. A subtask refuses a record of a bucket it does not own.
//   - Identity and fencing: subtask i writes as "<job>/<sink>#<i>" and
//     registers with the table on open, getting a higher epoch on every
//     restart; the table refuses batches of an older epoch (a zombie).
//   - Baseline: at every checkpoint (the first one is taken before any
//     record) the subtask flushes, syncs the table and saves, per owned
//     bucket, the log end offset: the complete baseline, changed buckets or
//     not, with the table's identity.
//   - Undo: on restore, before any source emits, every subtask merges the
//     baselines of all subtasks (union state), and for each bucket it now owns
//     scans the log from the baseline to the end captured at the start; for
//     each key the first entry written by this sink (any subtask) decides:
//     the sink's columns are set back to that entry's before-image (cleared if
//     the row did not exist; a row left with no value is deleted), in
//     OVERWRITE mode, as log entries flagged undo, followed by a rollback
//     marker naming the range. Entries of other writers are left alone, so
//     jobs writing disjoint columns do not disturb each other.
//   - Skipping undo: a sink whose columns are all idempotent (agg's
//     Func.Idempotent: merging an input again, even after later ones,
//     changes nothing; not last_value) and that does not retract leaves the
//     crashed run's writes in place; the replay changes no row until it
//     passes them, so no value ever goes back. The restore's commit marker
//     covers an empty range at the baseline, and the next checkpoint's
//     marker covers those writes (the exporter then exports them).
//   - Undo is idempotent: the baseline moves only when a new checkpoint
//     completes, and undo entries come after the entries they undo, so a
//     crash during undo and a second undo give the same table.
//   - A baseline beyond the log end, a log truncated below a baseline, state
//     of another table (a table recreated under the same name) or of another
//     sink, a bucket with two different baselines or none are errors naming
//     the table, the bucket and the offsets: never a silent full undo.
//   - Commit markers: when checkpoint N completes, each subtask appends a
//     commit marker per owned bucket naming the range N covers, for the
//     changelog exporter.
//   - Partials: a sink declared Config.Partials takes values that are
//     partial aggregates already (a final window's pre-aggregated row) and
//     writes them in Partial mode; undo and the rest are unchanged.
package writer
