// Package runtime runs dataflow jobs: it turns a logical graph of sources,
// operators and sinks into parallel subtasks, chains operators joined by
// forward edges into one goroutine, moves records between subtasks in
// bounded batches, and coordinates aligned checkpoints, restore and restart.
//
// runtime declares what a source, an operator and a checkpointing sink must
// do; Kafka, pebble and the aggregation table implement those contracts in
// packages above it. runtime imports neither Kafka, pebble, the sink nor the
// YAML pipelines.
package runtime
