package writer

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
	"github.com/ebbflow/ebbflow/state"
)

// Config configures the exactly-once writer of one table.
type Config struct {
	// Table is the table written; the caller opens and closes it (several
	// jobs of one process share one handle).
	Table *aggmerge.Table
	// Columns are the value columns written (empty: all). Jobs writing the
	// same table must write disjoint columns.
	Columns []string
	// Retracts declares that the input may hold UpdateBefore/Delete rows,
	// which retract. It is refused when a column's function cannot retract.
	Retracts bool
	// Partials declares that the values are partial aggregates already
	// (agg.Func.Partial, folded with Combine or an agg.Accumulator, as a
	// window that pre-aggregates its records emits them), written in
	// aggmerge.Partial mode: a count's value is the number it counted, not
	// one more input. It cannot be combined with Retracts.
	Partials bool
	// Clears declares that the input may hold rows with Row.Clear, which
	// remove the written columns of a row. A restore then always undoes (a
	// replayed clear is no harmless replay). It cannot be combined with a
	// Window whose keys the writer makes (only with Window.Assigned).
	Clears bool
	// BatchSize is the number of writes per table batch (1000).
	BatchSize int
	// FlushInterval bounds how long a write waits in the writer before it
	// reaches the table (100ms); every barrier flushes too. FlushAtCheckpoint
	// flushes at barriers only (and when CombineKeys or BatchSize fill up).
	FlushInterval time.Duration
	// NoCombine turns off pre-aggregation. By default the rows of one key
	// between two flushes are combined in memory and written once, so the
	// table and its changelog grow with distinct keys, not with records.
	NoCombine bool
	// CombineKeys bounds the keys combined in memory before an early flush
	// (65536).
	CombineKeys int
	// TruncateLog truncates the table's log, after each completed
	// checkpoint, below what every holder still needs (Table.TruncateHeld):
	// this sink back to its oldest retained checkpoint, other sinks and the
	// changelog exporter by their own holds. Set it once every reader of the
	// log (an exporter) holds what it needs; the sink always records its own
	// hold.
	TruncateLog bool
	// Window, when set, aggregates per window of event time (see Window).
	Window *Window
	// Job and Sink, if set, name the writer instead of the runtime job and
	// the operator: its ids are "<Job>/<Sink>#<subtask>", registered for
	// Job. Stage 2 of a scaled job applies the rows of each job that
	// writes the table through the hop as that job's writer (package
	// repartition), so the registry keeps the jobs' columns apart.
	Job, Sink string
	// UnsafeSkipUndo turns undo off. It exists for tests that prove the crash
	// harness detects double counting; never set it otherwise.
	UnsafeSkipUndo bool
}

// FlushAtCheckpoint is the FlushInterval of a writer that writes to the
// table at checkpoints only: a key changed between two checkpoints costs one
// table write and one log entry per checkpoint, not one per 100 ms, and
// the table's rows are as fresh as the last checkpoint (plus early flushes
// when CombineKeys keys wait). Exactly-once is the same as with any
// interval: the barrier's flush is synced before the baseline is taken,
// what waits in the combiner at a crash was read after the restored
// checkpoint and is read again.
const FlushAtCheckpoint time.Duration = -1

func (c *Config) setDefaults() {
	if c.BatchSize <= 0 {
		c.BatchSize = 1000
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = 100 * time.Millisecond
	}
	if c.CombineKeys <= 0 {
		c.CombineKeys = 1 << 16
	}
}

// validate checks the configuration against the table, as early as the job
// is built.
func (c *Config) validate() error {
	if c.Table == nil {
		return errors.New("aggmerge writer: no table")
	}
	if c.FlushInterval < 0 && c.FlushInterval != FlushAtCheckpoint {
		return fmt.Errorf("aggmerge writer: negative flush interval %v (FlushAtCheckpoint flushes at checkpoints only)", c.FlushInterval)
	}
	sch := c.Table.Schema()
	if c.Window != nil {
		if err := c.Window.check(c.Table); err != nil {
			return err
		}
	}
	for _, name := range c.Columns {
		if sch.ValueIndex(name) < 0 {
			return fmt.Errorf("aggmerge writer: table %s has no value column %q", c.Table.Dir(), name)
		}
	}
	if c.Clears && c.Window != nil && !c.Window.Assigned {
		return errors.New("aggmerge writer: a windowed sink cannot clear rows (the writer makes their keys)")
	}
	if c.Retracts && c.Partials {
		return errors.New("aggmerge writer: partial aggregates cannot retract")
	}
	if c.Retracts {
		for _, i := range c.columnIndexes() {
			col := sch.Values[i]
			if !c.Table.Func(i).CanRetract() {
				return fmt.Errorf("aggmerge writer: table %s column %q: function %s cannot retract, and the input may retract (-U/-D)",
					c.Table.Dir(), col.Name, col.Func)
			}
		}
	}
	return nil
}

// columnIndexes returns the table indexes of the written value columns.
func (c *Config) columnIndexes() []int {
	sch := c.Table.Schema()
	if len(c.Columns) == 0 {
		idx := make([]int, len(sch.Values))
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	idx := make([]int, len(c.Columns))
	for i, name := range c.Columns {
		idx[i] = sch.ValueIndex(name)
	}
	return idx
}

// needsUndo reports whether a restore must undo: always, unless every
// written function is idempotent and nothing can retract or delete a
// window past retention (replaying the input then changes no row, not even
// for a moment: see agg's Func.Idempotent; TestCrashHarnessSkipUndo,
// TestRetentionNeedsUndo).
func (c *Config) needsUndo() bool {
	if c.UnsafeSkipUndo {
		return false
	}
	if c.Retracts || c.Clears || c.Window != nil && c.Window.Retain != nil {
		return true // a retraction, a clear or a window's delete is no harmless replay
	}
	for _, i := range c.columnIndexes() {
		if !c.Table.Func(i).Idempotent() {
			return true
		}
	}
	return false
}

// sink is one subtask of the writer.
type sink struct {
	cfg   Config
	table *aggmerge.Table
	ctx   *runtime.Context
	id    base.WriterID // this subtask's identity; its Group is the sink's
	w     aggmerge.Writer
	owned []int
	batch *aggmerge.Batch // filled by Write
	spare *aggmerge.Batch // empty, for Write while batch is applied
	comb  *combiner       // nil when combining is off
	ret   *retention      // nil unless the window has a retention
	timer bool            // a flush timer is set

	// snapshots maps a checkpoint not yet known complete to the base
	// it saved; committed is, per owned bucket, where the last commit
	// marker ended.
	snapshots map[barrier.CheckpointID]snapshotAt
	committed map[int]uint64
	// window holds the base of the retained completed checkpoints,
	// oldest first: the log must be kept from window[0] on.
	window []map[int]uint64
	// applying receives the outcome of the flush being applied to the table
	// on its own goroutine, so that the next records are mapped and combined
	// meanwhile; nil when none is. Only one is at a time, so batches reach
	// the table in order, and every other use of the table waits for it.
	applying chan error
}

func newSink(cfg Config) *sink {
	return &sink{cfg: cfg, table: cfg.Table,
		snapshots: map[barrier.CheckpointID]snapshotAt{}, committed: map[int]uint64{}}
}

// snapshotAt is what a snapshot saw: the owned buckets' log ends and the
// event time (eventTimeMs) the subtask's input had reached.
type snapshotAt struct {
	base        map[int]uint64
	eventTimeMs int64
}

// eventTimeMs is the event time a checkpoint of a subtask whose watermark
// is wm covers, in Unix milliseconds: every on-time record with an event
// time at or before it reached the subtask before the barrier (a
// watermark goes out after every record it covers), and is in the
// checkpoint. 0 (unknown) when the input has no event time yet (Min), an
// event time at or before the epoch, or its end (Max: a bounded input
// ended, whose newest event time the watermark does not tell).
func eventTimeMs(wm int64) int64 {
	if wm <= 0 || wm == watermark.Max {
		return 0
	}
	return wm / int64(time.Millisecond)
}

func (s *sink) Open(ctx *runtime.Context) error {
	s.ctx = ctx
	t := s.table
	s.id = base.WriterID{Job: cmp.Or(s.cfg.Job, ctx.Job), Sink: cmp.Or(s.cfg.Sink, ctx.Operator), Subtask: ctx.Subtask}
	s.w.ID = s.id.String()
	epoch, err := t.Register(s.id.Job, s.w.ID, s.cfg.Columns)
	if err != nil {
		return fmt.Errorf("%w: %w", runtime.ErrRestore, err)
	}
	s.w.Epoch = epoch
	buckets := t.Schema().Buckets
	for b := 0; b < buckets; b++ {
		if Owner(b, ctx.Parallelism) == ctx.Subtask {
			s.owned = append(s.owned, b)
		}
	}
	if s.batch, err = t.NewBatch(s.w, s.cfg.Columns); err != nil {
		return err
	}
	if s.spare, err = t.NewBatch(s.w, s.cfg.Columns); err != nil {
		return err
	}
	if !s.cfg.NoCombine {
		s.comb = newCombiner(t, s.cfg.columnIndexes(), s.cfg.Partials)
	}
	if err := s.restore(); err != nil {
		return err
	}
	return s.openRetention(ctx.Registerer)
}

// restore undoes what the sink wrote past the restored checkpoint, or
// starts afresh when there is none.
func (s *sink) restore() error {
	t := s.table
	items := s.ctx.State.Unions[stateList] // none on a fresh start
	if len(items) == 0 {
		return s.startAfresh()
	}
	baselines, err := mergeBaselines(items, t.Dir(), t.ID().String(), s.id.Group(), t.Schema().Buckets)
	if err != nil {
		return fmt.Errorf("%w: %w", runtime.ErrRestore, err)
	}
	if err := s.recover(baselines); err != nil {
		return fmt.Errorf("%w: %w", runtime.ErrRestore, err)
	}
	s.window = []map[int]uint64{mergeHolds(items, baselines)}
	for _, b := range s.owned {
		s.committed[b] = baselines[b]
	}
	return nil
}

// startAfresh starts a sink that has no state to restore: a fresh start of
// the job (no checkpoint, or none kept), or a sink added to the job since
// the restored checkpoint. Its writes start at the log ends. That is only
// safe if no writer of the sink (any subtask, any parallelism) has written
// to the table: what they wrote could not be undone, and the input would
// count again on top of it, so the start is refused (LostStateError).
func (s *sink) startAfresh() error {
	t := s.table
	if lost := lostState(t, s.id); lost != nil {
		lost.Restored, lost.RestoredOK = uint64(s.ctx.Restored), s.ctx.RestoredOK
		return fmt.Errorf("%w: %w", runtime.ErrRestore, lost)
	}
	ends := t.LogEnds()
	for _, b := range s.owned {
		s.committed[b] = ends[b]
	}
	if s.ctx.RestoredOK {
		s.ctx.Logger.Info("sink new since the restored checkpoint: nothing to undo", "table", t.Dir(), "sink", s.id.Group(), "checkpoint", s.ctx.Restored)
	}
	return nil
}

// recover undoes, in every owned bucket, what this sink wrote past its
// baseline, then marks the restored checkpoint committed.
func (s *sink) recover(base map[int]uint64) error {
	t, log := s.table, s.ctx.Logger
	undo := s.cfg.needsUndo()
	start := time.Now()
	var scanned, restored int
	cols := s.cfg.columnIndexes()
	marks, err := t.NewBatch(s.w, s.cfg.Columns)
	if err != nil {
		return err
	}
	// Check every owned bucket before undoing any, so that a restore that
	// fails leaves the table as it found it; the ends are captured here.
	ends := make(map[int]uint64, len(s.owned))
	for _, b := range s.owned {
		first, end, err := t.LogOffsets(b)
		if err != nil {
			return err
		}
		switch {
		case base[b] > end:
			return fmt.Errorf("table %s bucket %d: %w: baseline %d, log end %d: the table lost writes a checkpoint covers (corrupt, or restored from an older copy)",
				t.Dir(), b, aggmerge.ErrBeyondLogEnd, base[b], end)
		case base[b] < first && base[b] < end:
			return fmt.Errorf("table %s bucket %d: %w: baseline %d, log starts at %d", t.Dir(), b, aggmerge.ErrBelowLogStart, base[b], first)
		}
		ends[b] = end
	}
	for i, b := range s.owned {
		if end := ends[b]; undo && base[b] < end {
			p, err := planUndo(t, b, base[b], end, s.id.Group(), cols)
			if err != nil {
				return fmt.Errorf("undo table %s bucket %d from %d to %d: %w", t.Dir(), b, base[b], end, err)
			}
			if err := applyUndo(t, s.w, s.cfg.Columns, p, uint64(s.ctx.Restored)); err != nil {
				return fmt.Errorf("undo table %s bucket %d from %d to %d: %w", t.Dir(), b, base[b], end, err)
			}
			scanned += p.scanned
			restored += len(p.keys)
			log.Debug("bucket undone", "table", t.Dir(), "bucket", b, "from", base[b], "to", end,
				"entries", p.scanned, "keys", len(p.keys), "buckets_done", i+1, "buckets", len(s.owned))
		}
		err = marks.Mark(b, aggmerge.Marker{Kind: aggmerge.MarkerCommit, Checkpoint: uint64(s.ctx.Restored), From: base[b], To: base[b]})
		if err != nil {
			return err
		}
	}
	if _, err := t.Apply(marks); err != nil {
		return err
	}
	// The restored event time is the least the checkpoint's subtasks saved
	// (the task's floor, runtime.Context.Watermark before any input).
	if err := t.RecordCheckpoint(s.w, uint64(s.ctx.Restored), eventTimeMs(s.ctx.Watermark())); err != nil {
		return err
	}
	if err := t.Sync(); err != nil {
		return err
	}
	d := time.Since(start)
	log.Info("undo finished", "table", t.Dir(), "checkpoint", s.ctx.Restored, "buckets", len(s.owned),
		"entries_scanned", scanned, "keys_restored", restored, "duration", d, "skipped", !undo)
	return registerUndo(s.ctx.Registerer, scanned, restored, d)
}

// registerUndo publishes what the restore's undo did, as gauges of the
// subtask (its Registerer is labelled with job, operator and subtask).
func registerUndo(reg prometheus.Registerer, scanned, restored int, d time.Duration) error {
	if reg == nil {
		return nil
	}
	for _, g := range []struct {
		name, help string
		v          float64
	}{
		{"ebbflow_sink_undo_entries_scanned", "Log entries the last restore's undo read.", float64(scanned)},
		{"ebbflow_sink_undo_keys_restored", "Keys the last restore's undo set back.", float64(restored)},
		{"ebbflow_sink_undo_duration_seconds", "Duration of the last restore's undo.", d.Seconds()},
	} {
		m := prometheus.NewGauge(prometheus.GaugeOpts{Name: g.name, Help: g.help})
		m.Set(g.v)
		if err := reg.Register(m); err != nil {
			return fmt.Errorf("register undo metrics: %w", err)
		}
	}
	return nil
}

func (s *sink) Write(batch []record) error {
	for i := range batch {
		r := &batch[i]
		if b := int(r.bucket); Owner(b, s.ctx.Parallelism) != s.ctx.Subtask {
			return fmt.Errorf("aggmerge writer %s: table %s: a record of bucket %d reached subtask %d, the bucket's owner is subtask %d of %d",
				s.w.ID, s.table.Dir(), b, s.ctx.Subtask, Owner(b, s.ctx.Parallelism), s.ctx.Parallelism)
		}
		if s.ret != nil && !s.ret.keep(r, s.ctx.Watermark()) {
			continue
		}
		if r.clear {
			if err := s.uncombined(func() error { return s.batch.DeleteEncoded(aggmerge.Overwrite, r.key) }); err != nil {
				return err
			}
			continue
		}
		mode := aggmerge.Aggregate
		switch {
		case r.kind.Retracts():
			mode = aggmerge.Retract
		case s.cfg.Partials:
			mode = aggmerge.Partial
		}
		if s.comb != nil && mode != aggmerge.Retract {
			if err := s.comb.add(r.key, r.vals); err != nil {
				return err
			}
			if s.comb.len() >= s.cfg.CombineKeys {
				if err := s.flush(); err != nil {
					return err
				}
			}
			continue
		}
		if err := s.uncombined(func() error { return s.batch.UpsertEncoded(mode, r.key, r.vals) }); err != nil {
			return err
		}
	}
	if !s.timer && s.cfg.FlushInterval > 0 && (s.batch.Len() > 0 || (s.comb != nil && s.comb.len() > 0)) {
		s.ctx.SetTimer(time.Now().Add(s.cfg.FlushInterval))
		s.timer = true
	}
	return nil
}

// uncombined adds a write that is not combined (a retraction, a clear) to
// the batch with add, after the writes combined before it, so a key's
// writes keep their order.
func (s *sink) uncombined(add func() error) error {
	if s.comb != nil && s.comb.len() > 0 {
		if err := s.comb.drain(s.batch); err != nil {
			return err
		}
	}
	if err := add(); err != nil {
		return err
	}
	if s.batch.Len() >= s.cfg.BatchSize {
		return s.flush()
	}
	return nil
}

// OnTimer flushes what waited FlushInterval.
func (s *sink) OnTimer(time.Time) error {
	s.timer = false
	return s.flush()
}

// flush hands everything waiting to a goroutine that applies it to the
// table (unsynced), once the previous flush is applied.
func (s *sink) flush() error {
	if s.comb != nil && s.comb.len() > 0 {
		if err := s.comb.drain(s.batch); err != nil {
			return err
		}
	}
	if s.batch.Len() == 0 {
		return nil
	}
	if err := s.applied(); err != nil {
		return err
	}
	b := s.batch
	s.batch, s.spare = s.spare, b
	done := make(chan error, 1)
	s.applying = done
	go func() {
		_, err := s.table.Apply(b)
		b.Reset()
		done <- err
	}()
	return nil
}

// applied waits until the flush being applied, if any, is, and returns its
// error.
func (s *sink) applied() error {
	if s.applying == nil {
		return nil
	}
	err := <-s.applying
	s.applying = nil
	return err
}

func (s *sink) Snapshot(id barrier.CheckpointID) (state.OperatorState, error) {
	if err := s.flush(); err != nil {
		return state.OperatorState{}, err
	}
	if err := s.applied(); err != nil {
		return state.OperatorState{}, err
	}
	ends, err := s.table.SyncEnds()
	if err != nil {
		return state.OperatorState{}, err
	}
	base := make(map[int]uint64, len(s.owned))
	for _, b := range s.owned {
		base[b] = ends[b]
	}
	s.snapshots[id] = snapshotAt{base: base, eventTimeMs: eventTimeMs(s.ctx.Watermark())}
	hold := base
	if len(s.window) > 0 {
		hold = s.window[0]
	}
	item, err := snapshotState{Version: stateVersion, Table: s.table.Dir(), TableID: s.table.ID().String(),
		Sink: s.id.Group(), Subtask: s.ctx.Subtask, Parallelism: s.ctx.Parallelism,
		Buckets: s.table.Schema().Buckets, Baselines: base, Hold: owned(hold, s.owned)}.encode()
	if err != nil {
		return state.OperatorState{}, err
	}
	return state.OperatorState{Unions: map[string][][]byte{stateList: {item}}}, nil
}

// NotifyComplete appends a commit marker to every owned bucket whose log
// moved since the last one: the changelog exporter's signal that the range
// is covered by a completed checkpoint.
func (s *sink) NotifyComplete(id barrier.CheckpointID) error {
	if err := s.applied(); err != nil {
		return err
	}
	at, ok := s.snapshots[id]
	if !ok {
		return nil
	}
	base := at.base
	for _, old := range slices.Collect(maps.Keys(s.snapshots)) {
		if old <= id {
			delete(s.snapshots, old)
		}
	}
	marks, err := s.table.NewBatch(s.w, s.cfg.Columns)
	if err != nil {
		return err
	}
	for _, b := range s.owned {
		if base[b] == s.committed[b] {
			continue
		}
		if err := marks.Mark(b, aggmerge.Marker{Kind: aggmerge.MarkerCommit, Checkpoint: uint64(id), From: s.committed[b], To: base[b]}); err != nil {
			return err
		}
		s.committed[b] = base[b]
	}
	if marks.Len() > 0 {
		if _, err := s.table.Apply(marks); err != nil {
			return err
		}
	}
	if err := s.table.RecordCheckpoint(s.w, uint64(id), at.eventTimeMs); err != nil {
		return err
	}
	return s.retain(base)
}

// retain slides the window of retained checkpoints to include base and
// records the sink's hold on the log; the oldest retained checkpoint stays
// restorable.
func (s *sink) retain(base map[int]uint64) error {
	s.window = append(s.window, base)
	if k := max(s.ctx.RetainedCheckpoints, 1); len(s.window) > k {
		s.window = s.window[len(s.window)-k:]
	}
	if err := s.table.Hold(aggmerge.HolderOf(s.w.ID), owned(s.window[0], s.owned)); err != nil {
		return err
	}
	if s.cfg.TruncateLog {
		return s.table.TruncateHeld()
	}
	return nil
}

// owned keeps the offsets of the given buckets.
func owned(offsets map[int]uint64, buckets []int) map[int]uint64 {
	out := make(map[int]uint64, len(buckets))
	for _, b := range buckets {
		if off, ok := offsets[b]; ok {
			out[b] = off
		}
	}
	return out
}

// Close waits for the flush being applied: what it writes past the last
// checkpoint is undone at the next restore, like any write after it.
func (s *sink) Close() error { return s.applied() }
