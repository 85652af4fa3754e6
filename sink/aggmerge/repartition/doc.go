// Package repartition is the hop of a job scaled over several processes
// (docs/SCALING.md): the table sink's shuffle by bucket, crossing processes
// through a Kafka topic partitioned by bucket.
//
// A Writer is stage 1 of an instance: a member of the job's consumer group
// over the input topics and a transactional producer in one franz-go
// GroupTransactSession. It sends each partial row (the table's encoded
// primary key, a row kind, the target columns' values) to the partition of
// its bucket, base.Owner(bucket, partitions), and at each checkpoint commits
// the rows together with the input offsets of everything it polled, in one
// transaction (exactly-once v2, KIP-447). A rebalance or a failed write
// aborts the transaction instead, and the input is read again from the
// offsets of the last commit.
//
// Stage 2 reads the partitions the instance owns, read_committed,
// with an ordinary Kafka source whose offsets live in the job's
// checkpoints, and writes the decoded rows with the exactly-once writer.
//
// Independent jobs on one table (docs/SCALING.md): the partial rows of a
// job writing into an owner job's table carry its job and columns in
// headers (a row without them is the owner's); the
// Router gives stage 2 one exactly-once writer per job, registered for
// that job and its columns, and refuses (ErrColumns) a row whose columns
// are not exactly its job's. Invariant: each column of the table changes
// only through its job's writer, so a Publisher takes each writer's
// columns as of that writer's commit marker.
//
// Failover (docs/SCALING.md, "the owner log"): the owner of a partition
// publishes what stage 2 committed to the partition's owner log
// (Publisher: row images of the bucket, then a Seal with the ownership
// epoch and the repartition offset to resume at, in one transaction with
// a transactional id per partition). A new owner calls Take before its
// stage 2 starts: it fences the previous owner, reads the owner log
// checking the chain of seals and epochs (ErrTwoOwners), rebuilds the
// bucket, claims the next epoch and returns the offset at which the
// source resumes (SourceConfig.Resume). CheckOwners checks a whole owner
// log. Invariants: only the holder of a partition's producer id commits to
// its owner log; every seal is based on the seal before it; a seal's rows
// and resume offset are of one completed stage-2 checkpoint, so a rebuild
// plus the resume applies every committed repartition row exactly once.
//
// Dynamic ownership (docs/SCALING.md, "Dynamic ownership"): Owners makes
// stage 2 a member of the group <job>.owners over the repartition topic
// and runs it in incarnations, one per assignment: each starts with a Take
// (with Clear) of every partition assigned, reads each from its Resume
// (SourceConfig.ResumeOnRestore) and publishes with a Publisher per
// partition; a revocation waits until the incarnation stopped with a final
// checkpoint that is published. Invariants: at the start of an
// incarnation each owned bucket equals its last seal and every other
// bucket is empty in the table; a handover clears or rebuilds a bucket
// only when no undo of the table's writer is pending (a settling run
// restores and undoes first), and the rebuild's writer id is outside the
// writer's group. ReadAll reads a whole table from the owner log.
//
// Files: writer.go (stage 1), partial.go (the wire format), source.go
// (stage 2's reader), route.go (the jobs' writers in stage 2), ownerlog.go (owner-log records, the chain check,
// CheckOwners), handover.go (Take, ReadAll), publisher.go (Publisher),
// owners.go (Owners).
package repartition
