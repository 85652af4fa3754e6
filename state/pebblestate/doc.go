// Package pebblestate is the pebble-backed state.KeyedBackend: one pebble DB
// per operator subtask in the subtask's working folder.
//
// The DB has no WAL: its working folder is thrown away on every restart and
// durability comes from checkpoints. A batch is written in key order (the
// memtable then inserts each key next to the previous one). A checkpoint
// flushes the memtable into an sstable and takes a pebble Checkpoint (hard
// links to the immutable sstables, a copy of the manifest), synchronously
// into the checkpoint folder; the asynchronous persist step only computes
// the files' sizes and CRC-32Cs, remembering those of sstables, which never
// change.
//
// Restore verifies every file against the checkpoint metadata first. When a
// single snapshot covers the owned key groups, the working DB starts from its
// files (sstables hard-linked, the mutable manifest, WAL and options copied,
// since pebble may rewrite those in place) and the groups not owned are
// deleted by range. Otherwise (rescale) each overlapping snapshot is opened
// read-only from such a copy and its owned groups are written into a fresh DB.
package pebblestate
