// Package build turns validated job files (pipelines.Pipeline) into runtime
// jobs: it wires the Kafka and datagen sources, the compiled transforms and
// the exactly-once table writer, and owns what the jobs of one runner share
// (the data directory, the embedded broker, the tables and their changelog
// exporters).
//
// Each kind of source and sink that pipelines registers
// (pipelines.Components) has its wiring here, by name (sourceWiring,
// sinkWiring in job.go); a test keeps the two registries equal.
//
// A job is built as: each source → its own "<source>-transforms" operator
// (so a runtime expression error follows that source's on_error policy) →
// a union when there are several sources → for each table sink, the writer
// of package sink/aggmerge/writer, which partitions by bucket. key_by is
// the primary key (the loader checks it), so that partitioning is the only
// shuffle. A Kafka source of format upsert-json or debezium-json reads a
// changelog: its records decode into kafka.Changes, upsert-json ones pass
// kafka.NormalizeChanges ("<source>-normalize", the last row of every key
// in keyed state: a second shuffle, by record key), and the transforms operator turns each change into its
// +I/-U/+U/-D rows, with the kind in the row's kind slot, before running
// the steps on each; the writers of such a job are declared Retracts and
// take -U and -D rows back out. The rows of a Kafka source carry their
// record to the transforms, so that a row whose expressions fail is
// dead-lettered (kafka.DeadLetterWriter) with its origin.
//
// Offline is the same record path outside a job, for an oracle that
// recomputes a job's tables from its input (runner verify): a Kafka
// source's decoding (rowFormat), the steps and the tables' checks
// (transform, as the transforms operator runs them), the datagen's
// records, and the writers' mapping (mapper), each shared with the job's
// wiring rather than copied; CoveredBy reads what a completed checkpoint
// covers of each source.
//
// A table's changelog exporter gets the transactional id
// ebbflow-<deployment>-<job>-<table> (DeploymentID: made once per data
// directory), or the file's changelog.transactional_id; the ids of holds
// that earlier exporters left on the table's log are passed as former ids,
// closed once and released.
//
// Invariants:
//   - one Env per data directory and process; it opens each table once
//     (pebble allows one process per table) with the columns of every job
//     that writes it, and every job shares that handle;
//   - Env.Close closes tables only after every job and exporter that uses
//     them has returned (the caller runs jobs; Env owns exporters);
//   - a datagen source is deterministic: record n is a pure function of the
//     seed and n, and the position saved at a checkpoint is the next n of
//     each lane, so a replay after a restore is exact;
//   - a datagen producing into a topic writes record n to partition
//     n mod partitions, in order, and resumes after the last record each
//     partition holds: no gap and no duplicate across restarts.
package build
