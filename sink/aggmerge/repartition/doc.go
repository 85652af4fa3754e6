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
// checkpoints, and writes the decoded rows with the exactly-once writer
// (Mapper).
package repartition
