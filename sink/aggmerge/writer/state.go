package writer

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/ebbflow/ebbflow/internal/base"
)

// ErrState marks writer state that cannot be restored safely.
var ErrState = errors.New("aggmerge writer: state not restorable")

// LostStateError refuses to start a sink without state (a fresh start, or
// a restored checkpoint that holds none of the sink) while the table holds
// writes of its writers: they cannot be undone, and the input would count
// again on top of them. It wraps ErrState.
type LostStateError struct {
	Table string // the table's directory
	Job   string // the sink's job
	Sink  string // <job>/<sink>
	// Writers are the sink's writers that have written to the table;
	// Checkpoint is the newest checkpoint one of them committed, if
	// Committed.
	Writers    []string
	Committed  bool
	Checkpoint uint64
	// Restored is the checkpoint restored, if RestoredOK (else the job
	// started afresh).
	Restored   uint64
	RestoredOK bool
}

func (e *LostStateError) Error() string {
	last := "no checkpoint committed"
	if e.Committed {
		last = fmt.Sprintf("last committed checkpoint %d", e.Checkpoint)
	}
	start := "the job starts afresh (no checkpoint restored)"
	if e.RestoredOK {
		start = fmt.Sprintf("the restored checkpoint %d holds no state of the sink", e.Restored)
	}
	writers := "writer "
	if len(e.Writers) > 1 {
		writers = "writers "
	}
	return fmt.Sprintf("%v: table %s holds the writes of sink %s (%s%s; %s), but %s: "+
		"what they wrote cannot be undone and the input would count again on top of it; "+
		"restore a checkpoint holding the sink's state, reset the sink (undo everything it wrote, then start afresh), "+
		"or unregister its writers to keep their rows as they are",
		ErrState, e.Table, e.Sink, writers, strings.Join(e.Writers, ", "), last, start)
}

func (e *LostStateError) Unwrap() error { return ErrState }

// stateList is the union list holding every subtask's baseline.
const stateList = "aggmerge-writer"

// stateVersion is the version of the state item this package writes.
const stateVersion = 1

// snapshotState is what one subtask saves at a checkpoint: the table's
// identity, the sink's, and the log end offset of every bucket it owns.
type snapshotState struct {
	Version     int            `json:"version"`
	Table       string         `json:"table"` // the table's directory, for messages
	TableID     string         `json:"table_id"`
	Sink        string         `json:"sink"` // <job>/<sink>
	Subtask     int            `json:"subtask"`
	Parallelism int            `json:"parallelism"`
	Buckets     int            `json:"buckets"`
	Baselines   map[int]uint64 `json:"baselines"`
	// Hold is, per bucket, the oldest baseline of the checkpoints retained
	// with this one: the log must be kept from there for any of them to be
	// restorable.
	Hold map[int]uint64 `json:"hold,omitempty"`
}

func (s snapshotState) encode() ([]byte, error) { return json.Marshal(s) }

// Owner is the subtask of p that owns bucket b, b mod p: the one function
// used for the shuffle (runtime.PartitionBy), baselines, undo and rescale.
func Owner(bucket, parallelism int) int { return base.Owner(bucket, parallelism) }

// mergeBaselines checks the restored items of every subtask and returns the
// baseline of every bucket. All checks name the table, the bucket and the
// offsets involved.
func mergeBaselines(items [][]byte, table, tableID, sink string, buckets int) (map[int]uint64, error) {
	base := make(map[int]uint64, buckets)
	from := make(map[int]int, buckets) // bucket -> old subtask that gave it
	var errs []error
	for _, raw := range items {
		var s snapshotState
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%w: table %s: decode baseline: %w", ErrState, table, err)
		}
		var bad error
		switch {
		case s.Version != stateVersion:
			bad = fmt.Errorf("baseline version %d, want %d", s.Version, stateVersion)
		case s.TableID != tableID:
			bad = fmt.Errorf("baselines are of table %s id %s, the table now has id %s (recreated under the same name?)", s.Table, s.TableID, tableID)
		case s.Sink != sink:
			bad = fmt.Errorf("baselines are of sink %s, not %s", s.Sink, sink)
		case s.Buckets != buckets:
			bad = fmt.Errorf("baselines cover %d buckets, the table has %d", s.Buckets, buckets)
		}
		if bad != nil {
			errs = append(errs, fmt.Errorf("subtask %d (%s): %w", s.Subtask, formatBaselines(s.Baselines), bad))
		}
		for b, off := range s.Baselines {
			if b < 0 || b >= buckets {
				errs = append(errs, fmt.Errorf("bucket %d: out of range [0, %d)", b, buckets))
				continue
			}
			if prev, dup := base[b]; dup && prev != off {
				errs = append(errs, fmt.Errorf("bucket %d: conflicting baselines %d (subtask %d) and %d (subtask %d)", b, prev, from[b], off, s.Subtask))
				continue
			}
			base[b], from[b] = off, s.Subtask
		}
	}
	var missing []int
	for b := 0; b < buckets; b++ {
		if _, ok := base[b]; !ok {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		sort.Ints(missing)
		errs = append(errs, fmt.Errorf("buckets %v have no baseline (incomplete state)", missing))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: table %s, sink %s: %w", ErrState, table, sink, errors.Join(errs...))
	}
	return base, nil
}

// mergeHolds returns, per bucket, the oldest baseline that the restored
// checkpoint's retained predecessors need (the bucket's baseline when the
// state names none). items were checked by mergeBaselines.
func mergeHolds(items [][]byte, base map[int]uint64) map[int]uint64 {
	hold := make(map[int]uint64, len(base))
	for b, off := range base {
		hold[b] = off
	}
	for _, raw := range items {
		var s snapshotState
		if json.Unmarshal(raw, &s) != nil {
			continue
		}
		for b, h := range s.Hold {
			if cur, ok := hold[b]; ok && h < cur {
				hold[b] = h
			}
		}
	}
	return hold
}

// formatBaselines lists baselines by bucket: "bucket 0 at 12, bucket 2 at 40".
func formatBaselines(base map[int]uint64) string {
	buckets := slices.Sorted(maps.Keys(base))
	parts := make([]string, len(buckets))
	for i, b := range buckets {
		parts[i] = fmt.Sprintf("bucket %d at %d", b, base[b])
	}
	return strings.Join(parts, ", ")
}
