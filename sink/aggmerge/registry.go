package aggmerge

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// Registry errors.
var (
	ErrFenced         = errors.New("aggmerge: writer epoch fenced by a newer registration")
	ErrColumnConflict = errors.New("aggmerge: target columns overlap another job's writer")
)

// Registration is a writer registered with the table: the exactly-once
// writer registers before it writes, so that a zombie of an older epoch is
// fenced and two jobs cannot write the same columns. A registration
// outlives restarts; only Unregister removes it.
//
// It also records what the writer did: Wrote is set in the same pebble
// batch as its first write that changes a row (so it is never lost while
// the write is kept), and Checkpoint is the last checkpoint it committed
// (RecordCheckpoint). A writer that starts without state while Wrote is set
// cannot undo what it wrote; ForgetWrites clears Wrote once its writes
// were all taken back.
type Registration struct {
	Writer  string   `json:"writer"`
	Job     string   `json:"job"`
	Columns []string `json:"columns,omitempty"` // empty: every value column
	Epoch   uint64   `json:"epoch"`
	Wrote   bool     `json:"wrote,omitempty"`
	// Committed says that Checkpoint is set.
	Committed  bool   `json:"committed,omitempty"`
	Checkpoint uint64 `json:"checkpoint,omitempty"`
	// EventTimeMs is the event time the writer's input had reached at
	// Checkpoint (its watermark, in Unix milliseconds: every on-time record
	// at or before it is in the checkpoint), 0 when unknown.
	EventTimeMs int64 `json:"event_time_ms,omitempty"`
}

const metaWriterPrefix = "writer/"

// Register registers writer of job for the given target columns (empty:
// all) and returns its new epoch: 1 the first time, one more than the last
// on every later call. From then on, Apply refuses batches of this writer
// with an older epoch (ErrFenced) or with columns outside the registered
// ones. Registering columns that overlap a writer of another job is
// ErrColumnConflict; the same writer id under another job is refused too.
func (t *Table) Register(job, writer string, columns []string) (uint64, error) {
	if writer == "" || job == "" {
		return 0, fmt.Errorf("register writer: %w: empty job or writer id", ErrInvalid)
	}
	cols, err := t.canonicalColumns(columns)
	if err != nil {
		return 0, fmt.Errorf("register writer %q: %w", writer, err)
	}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkOpen(); err != nil {
		return 0, err
	}
	t.mu.RLock()
	prev, had := t.mu.writers[writer]
	others := make([]Registration, 0, len(t.mu.writers))
	for _, r := range t.mu.writers {
		others = append(others, r)
	}
	t.mu.RUnlock()
	if had && prev.Job != job {
		return 0, fmt.Errorf("register writer %q for job %q: %w: it belongs to job %q", writer, job, ErrColumnConflict, prev.Job)
	}
	sort.Slice(others, func(i, j int) bool { return others[i].Writer < others[j].Writer })
	for _, o := range others {
		if o.Job != job && overlap(cols, o.Columns) {
			return 0, fmt.Errorf("register writer %q of job %q on %v: %w: writer %q of job %q on %v",
				writer, job, display(cols), ErrColumnConflict, o.Writer, o.Job, display(o.Columns))
		}
	}
	reg := prev // what it did is kept
	reg.Writer, reg.Job, reg.Columns, reg.Epoch = writer, job, cols, prev.Epoch+1
	if err := t.putWriterLocked(reg, pebble.Sync); err != nil {
		return 0, fmt.Errorf("register writer %q: %w", writer, err)
	}
	return reg.Epoch, nil
}

// RecordCheckpoint records checkpoint as the last one w committed, with
// the event time its input had reached there (Registration.EventTimeMs;
// 0: unknown), unsynced: a crash keeps the one before. An older epoch is
// ErrFenced.
func (t *Table) RecordCheckpoint(w Writer, checkpoint uint64, eventTimeMs int64) error {
	return t.updateWriter(w.ID, func(r *Registration) error {
		if w.Epoch < r.Epoch {
			return fmt.Errorf("%w (epoch %d, registered %d)", ErrFenced, w.Epoch, r.Epoch)
		}
		r.Committed, r.Checkpoint, r.EventTimeMs = true, checkpoint, max(eventTimeMs, 0)
		return nil
	}, pebble.NoSync)
}

// ForgetWrites records that everything writer wrote was taken back (a
// reset): it stays registered with its epoch, as a writer that has neither
// written nor committed a checkpoint.
func (t *Table) ForgetWrites(writer string) error {
	return t.updateWriter(writer, func(r *Registration) error {
		r.Wrote, r.Committed, r.Checkpoint, r.EventTimeMs = false, false, 0, 0
		return nil
	}, pebble.Sync)
}

// updateWriter changes writer's registration with edit and stores it.
func (t *Table) updateWriter(writer string, edit func(*Registration) error, opt *pebble.WriteOptions) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkOpen(); err != nil {
		return err
	}
	t.mu.RLock()
	reg, ok := t.mu.writers[writer]
	t.mu.RUnlock()
	if !ok {
		return fmt.Errorf("update writer %q of %q: %w: not registered", writer, t.dir, ErrInvalid)
	}
	if err := edit(&reg); err != nil {
		return fmt.Errorf("update writer %q of %q: %w", writer, t.dir, err)
	}
	if err := t.putWriterLocked(reg, opt); err != nil {
		return fmt.Errorf("update writer %q of %q: %w", writer, t.dir, err)
	}
	return nil
}

// putWriterLocked stores a registration; writeMu is held.
func (t *Table) putWriterLocked(reg Registration, opt *pebble.WriteOptions) error {
	raw, err := json.Marshal(reg)
	if err != nil {
		return err
	}
	if err := t.db.Set(encoding.MetaKey(metaWriterPrefix+reg.Writer), raw, opt); err != nil {
		return err
	}
	t.mu.Lock()
	t.mu.writers[reg.Writer] = reg
	t.mu.Unlock()
	return nil
}

// Unregister removes a writer's registration (an operator command: the
// writer will not come back to undo its writes).
func (t *Table) Unregister(writer string) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkOpen(); err != nil {
		return err
	}
	if err := t.db.Delete(encoding.MetaKey(metaWriterPrefix+writer), pebble.Sync); err != nil {
		return fmt.Errorf("unregister writer %q: %w", writer, err)
	}
	t.mu.Lock()
	delete(t.mu.writers, writer)
	t.mu.Unlock()
	return nil
}

// Writers returns the registrations, ordered by writer id.
func (t *Table) Writers() []Registration {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]Registration, 0, len(t.mu.writers))
	for _, r := range t.mu.writers {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Writer < out[j].Writer })
	return out
}

// checkWriter fences batches of a registered writer with an older epoch or
// with columns it did not register. Unregistered writers pass: the table is
// usable without the exactly-once writer. It returns the registration to
// store with the batch, its Wrote set, when the writer is registered and
// has not written yet (nil otherwise); writeMu is held.
func (t *Table) checkWriter(w Writer, cols []int) (*Registration, error) {
	t.mu.RLock()
	reg, ok := t.mu.writers[w.ID]
	t.mu.RUnlock()
	if !ok {
		return nil, nil
	}
	if w.Epoch < reg.Epoch {
		return nil, fmt.Errorf("apply batch of writer %q epoch %d to %q: %w (epoch %d)", w.ID, w.Epoch, t.dir, ErrFenced, reg.Epoch)
	}
	for _, c := range cols {
		if name := t.schema.Values[c].Name; len(reg.Columns) > 0 && !slices.Contains(reg.Columns, name) {
			return nil, fmt.Errorf("apply batch of writer %q to %q: %w: column %q is not registered", w.ID, t.dir, ErrInvalid, name)
		}
	}
	if reg.Wrote {
		return nil, nil
	}
	reg.Wrote = true
	return &reg, nil
}

// canonicalColumns checks the names and returns them sorted; naming every
// value column is the same as naming none.
func (t *Table) canonicalColumns(columns []string) ([]string, error) {
	cols := slices.Clone(columns)
	slices.Sort(cols)
	cols = slices.Compact(cols)
	for _, c := range cols {
		if t.schema.ValueIndex(c) < 0 {
			return nil, fmt.Errorf("%w: no value column %q", ErrInvalid, c)
		}
	}
	if len(cols) == len(t.schema.Values) {
		return nil, nil
	}
	return cols, nil
}

func overlap(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	return slices.ContainsFunc(a, func(c string) bool { return slices.Contains(b, c) })
}

func display(cols []string) any {
	if len(cols) == 0 {
		return "all columns"
	}
	return cols
}

// loadWriters reads the registrations.
func (t *Table) loadWriters() error {
	t.mu.writers = map[string]Registration{}
	lo := encoding.MetaKey(metaWriterPrefix)
	hi := encoding.MetaKey("writer0") // the end of the "writer/" range
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		var r Registration
		if err := json.Unmarshal(it.Value(), &r); err != nil {
			_ = it.Close()
			return fmt.Errorf("%w: writer registration %q: %v", ErrCorrupt, it.Key(), err)
		}
		t.mu.writers[r.Writer] = r
	}
	return it.Close()
}
