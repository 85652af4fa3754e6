// Package kafka is the Kafka source of ebbflow (franz-go underneath).
//
// Partitions are assigned to source subtasks explicitly, by SubtaskFor, not
// by consumer-group rebalancing. Each subtask consumes its partitions at
// exact offsets and hands out records in fetch order; Read returns within
// about 20 ms when there is nothing to read.
//
// Invariants:
//   - The offsets a Snapshot records are those just after the last record
//     Read returned (or dropped or dead-lettered): records fetched but not
//     yet handed out stay queued for the next Read, never dropped.
//   - Offsets live in checkpoints only, as a union list, so after a rescale
//     or when partitions were added each subtask finds the offsets of the
//     partitions it now reads. Consumer-group commits after a completed
//     checkpoint are for lag monitoring and are never read back on restore.
//   - A job without checkpoint resolves its start position to exact offsets
//     before the first checkpoint, so that checkpoint records where reading
//     began; a restored job needs no broker to open. Partitions absent from
//     the checkpoint (created or matched later) start at their earliest
//     offset.
//   - An undecodable record is never lost silently: it fails the job, is
//     counted as dropped, or is written to a dead-letter topic before the
//     checkpoint that covers it completes. The dead-letter topic is made
//     when a subtask opens (a topic that may not be made fails the start);
//     DeadLetterWriter is the one writer of dead letters, also for the
//     records a YAML job's transforms fail on.
//   - Broker outages are retried by the client; Read does not fail on them
//     (they are counted, logged at a limited rate and reported by Healthy).
//
// Files: source.go (the subtask: open, read, snapshot), partitions.go
// (assignment and the state encoding), discover.go (topic listing, start
// offsets, discovery goroutine), commit.go (group commits), deadletter.go,
// format.go and row.go/rowdecode.go (decoding), changelog.go and
// changelog_normalize.go (changelog changes and their normalization; the
// changelog formats are in package changelogfmt), config.go, security.go,
// health.go, metrics.go.
package kafka
