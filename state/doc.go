// Package state declares how operator state is kept and checkpointed, and
// holds what every backend shares: key groups, operator-state redistribution,
// typed keyed state with a write-back cache, codecs, and the checkpoint
// storage on the local filesystem.
//
// Keyed state is organised in key groups: a key belongs to group
// xxhash64(encoded key) mod maxParallelism, and subtask i of p owns a
// contiguous range of groups (see RangeFor). The runtime's keyBy partitioner
// uses the same function, so a job restored at another parallelism hands every
// group, with its state, to the subtask that now receives its keys.
//
// Operator state is a set of named lists of opaque items per subtask: plain
// lists are redistributed round-robin over the new subtasks on restore, union
// lists are given whole to every subtask (sources and exactly-once sinks use
// them to find the positions or baselines they now own).
//
// Operators use typed keyed state (Value, Map, List, Reducing, Aggregating)
// registered on a Keyed, which caches entries in Go maps and writes the dirty
// ones to the backend in one batch at Flush (at every barrier, before
// Capture) or when the cache is full. A cached read or write costs a map
// access and no allocation. Keys and values are turned into bytes by Codecs;
// the built-in ones for integers and strings preserve order.
//
// Backends implement KeyedBackend: the in-memory one here (tests, small
// state), the pebble one in state/pebblestate; state/statetest is the suite
// every backend passes.
//
// Checkpoints live in a Storage: one folder per checkpoint, named so that
// names sort by id, a subfolder per operator subtask, and the metadata file
// written last and atomically. A checkpoint without valid metadata, or whose
// files do not match their recorded sizes and CRC-32Cs, is skipped by Latest
// and reported by name. Every file that must survive a crash is written by
// WriteFileAtomic (temp file, fsync, rename, fsync folder).
//
// The backend key layout is [key group: 2 bytes][len(name): 1 byte][state
// name][encoded key], so a subtask's groups are one contiguous key range.
//
// The package imports barrier, the vocabulary leaf internal/base and the
// standard library only, never runtime.
package state
