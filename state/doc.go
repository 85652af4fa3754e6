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
// Backends implement KeyedBackend; the pebble one lives in state/pebblestate.
// The package imports barrier and the standard library only (plus xxhash),
// never runtime.
package state
