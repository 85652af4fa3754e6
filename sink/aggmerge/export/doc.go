// Package export publishes an aggregation-merge table's changelog to Kafka
// exactly once, and reads such a changelog back (Read, ReadTable).
//
// # Exporter
//
// One Exporter per table tails every bucket's log (Table.ReadLog) and
// produces to one topic with one partition per bucket (partition = bucket;
// the topic is created if absent, and waited for quietly until the broker
// lists it; an existing one must have exactly that many partitions). Its
// producer is transactional with an id fixed per table deployment
// (Config.TransactionalID; "ebbflow-export-<name>" when unset, which
// collides across deployments: the runner derives one per data
// directory), so a second exporter with the same id fences the first. Each
// export round reads up to MaxRecordsPerTxn changes (100,000), shared among the
// buckets with entries to export, and commits them in one transaction:
// every record is produced as soon as it is encoded, so the partitions are
// written in parallel while the next changes are read. The
// producer compresses its batches with snappy (franz-go's default) unless
// Kafka.ClientOptions choose another compression
// (kgo.ProducerBatchCompression).
//
// Every record carries headers: table, table id, bucket, log offset (of
// the +I, +U or -D entry; an update is exported once, at its +U), the
// checkpoint that committed it (0 when unknown), the undo flag, the op,
// the exporter's own restart point and its transactional id. On start (and
// after any failed transaction, instead of retrying blindly) the exporter
// first reads the last committed record of every partition: records of
// another table (another table id) stop it with ErrMismatch naming both
// tables and transactional ids, before it loads a producer id, so it never
// fences the topic's owner. Then it initialises each of
// Config.FormerTransactionalIDs once (completing or aborting what they left
// open) and releases their holds, loads its producer id, which fences
// zombies and aborts their open transaction, reads the last committed
// records again (read_committed, backwards in doubling windows past aborted
// records and markers) and resumes right after their log offsets: no gap,
// no duplicate across crashes. A log offset beyond the log end, or a
// restart point below the log's retained start stop the exporter with an
// error naming the table and offsets (ErrMismatch, ErrGap), never a silent
// gap. The transaction timeout is two checkpoint intervals plus 10 s.
//
// # Modes
//
// Uncommitted exports every change entry as written, undo entries
// included, after syncing the table (an unsynced write may be lost by a
// crash and written differently after it; it must not be in the topic).
//
// Committed (the default) exports an entry only once its writer's fate is
// known, and never an entry that is rolled back. Writers are matched by
// group, the writer id up to its last '#' ("<job>/<sink>", so every
// subtask of a sink, also after a rescale). For an entry e of group G the
// first marker of G after e decides: a commit marker with To > e's offset
// exports it (it is covered by a completed checkpoint); a rollback marker
// whose [From, To) holds it discards it; for an undo entry, the rollback
// marker that follows it makes it "the undo of that rollback". An entry of
// a writer that is not registered with the table (a plain writer, or one
// unregistered for good) is final at once. Entries are decided in log
// order: an undecided entry holds back every later entry of its bucket,
// whichever writer wrote them, so the order per key is the log's. A sink
// that skips undo (only idempotent columns) rolls nothing back: its
// restore's commit marker covers the empty range at the baseline, so the
// crashed run's entries past it wait for the first commit marker after the
// restore and are exported then (their values never go back: see the
// writer package).
//
// Several writers (jobs writing disjoint columns) share rows, and every
// entry carries the full row. When an entry of G is discarded, the columns
// it changed are masked, until G's rollback marker, in the images of every
// other exported entry of that key: they show the value before G's first
// rolled-back change, which is what the consumer last saw of them. An undo
// entry shows its own after-image (the truth from then on); when it
// changes nothing the consumer can see (the usual case: a crash undone
// before its writes were ever exported) it is not exported.
//
// Committed mode folds: the walk takes a bucket's decided entries a range
// at a time (up to the first undecided entry, the round's log end, or its
// budget of keys: in practice a checkpoint) and emits one change per key
// of the range, from its row before the range to its row after it, at the
// offset of its last change, in log order (fold.go). A whole range goes in
// one transaction, so a consumer never sees the states inside one. A
// deletion stays apart, after the row's last image before it: a row that
// lived within a range is still seen. A row set and set back has no
// record; when such a row changed last in the range, the range's last
// record carries that change's offset, so that a restart reads on after
// it. The restart point of a range's records
// covers the masks of every entry a restart reads again. The walk decodes
// only the images a fold or a mask needs (aggmerge.LogRead.Decode): an
// entry that moves an open fold on is kept encoded until the fold emits.
//
// So, in committed mode a read_committed consumer of bucket b sees a
// folded subsequence of b's log in offset order, in which every row image is the
// row with each writer's columns as that writer had them at its last
// committed (or still unmasked) write up to that offset. It never sees a
// value written by a write that was later rolled back. It sees a writer's
// write once that writer's checkpoint covering it has completed and every
// earlier entry of the bucket is decided: one writer slow to checkpoint
// delays the others in the buckets they share. Applying every record
// gives, per row, the table's row as of the last exported offset of its
// bucket, with the columns of writers whose later writes are not yet
// committed at their committed values.
//
// One case is not a crash: an operator restoring an older checkpoint on
// purpose rolls back writes that were committed, and possibly exported.
// Exported records cannot be taken back: committed mode keeps them and
// exports the undo entries that restore the older values as ordinary
// updates, flagged undo, checkpoint = the restored one. A consumer that
// applies the topic still ends equal to the table.
//
// # Versions
//
// In committed mode (unless Config.NoVersions) the exporter also publishes
// the table's versions (changelogfmt.Version) to a compacted topic of one
// partition (Config.VersionsTopic, "<Topic>.versions"), each in the
// transaction whose changelog records it ends at: produced after them (their
// offsets are its end offsets), committed with them. At the start of each
// round it reads the writers' registrations (currentWriters: per writer
// group, the checkpoint all its listed writers committed), then the log
// ends; after the selection, if every bucket was scanned to its end and its
// last marker passed, no group has a marker of a later checkpoint, no undo
// is under way, and the registrations did not change meanwhile
// (versionPoint), the export holds exactly those checkpoints and a version
// is due, with the upstream versions Config.Upstream gives (Upstream, from
// the jobs' source positions and the upstream versions topics). Numbers
// continue from the last version in the topic or Config.VersionsFile. A
// version equal to the last is not published. ReadVersions reads a
// versions topic.
//
// # Retention
//
// The exporter holds the table's log (Table.Hold, holder = its
// transactional id) from where a restarted exporter would read: the
// restart point in the header of each partition's last committed record
// (entries passed over after it, such as markers, are read again by a
// restart). It holds every bucket from the log start as soon as New
// makes it (before any job runs, so before any truncation), so
// Table.TruncateHeld, which the writer calls after its
// checkpoints, never drops an entry the exporter still needs; the hold is
// kept in the table across restarts. RetainFrom returns it; Exported
// returns how far the export has got. An exporter removed for good must
// release its hold (Table.ReleaseHold(x.Holder())).
//
// # Formats
//
// UpsertJSON and DebeziumJSON, see Format; package
// operators/kafka/changelogfmt writes them (this package turns the table's
// values into JSON and adds the headers) and reads them back. Values: null for absent and
// null, bool, int64 and float64 as JSON numbers, decimal as a string with
// the column's scale ("12.50"), timestamp as RFC 3339 UTC with six
// fractional digits (TimeLayout), bytes as standard base64, set<string> as
// an array of strings. Keys are objects of the primary-key columns in
// schema order; values hold the key columns then the value columns.
//
// Files: exporter.go (Run, sessions, transactions), select.go (committed
// and uncommitted selection, masks), fold.go (a range's changes per key), resume.go (topic check, reading the
// last committed records), versions.go (version points, numbers, the data
// dir's file), upstream.go (reading versions topics, Upstream),
// format.go and records.go (JSON rows, headers), consume.go (the reader),
// config.go, metrics.go.
package export
