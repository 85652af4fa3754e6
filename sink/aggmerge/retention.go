package aggmerge

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ebbflow/ebbflow/internal/base"
	"github.com/ebbflow/ebbflow/sink/aggmerge/encoding"
)

// Log retention: whoever still needs a bucket's log from some offset on —
// an exactly-once writer back to its oldest retained checkpoint, the
// changelog exporter back to what it has not exported — records a hold. The
// log is truncated only below the lowest hold of each bucket, and a bucket
// that a registered writer's holder has not held yet is never truncated:
// retention is never shorter than what a restore or an export needs.

const metaHoldPrefix = "hold/"

// HolderOf is the retention holder of a writer id: its group, the part
// before its last '#', so every subtask of one sink shares one holder
// whatever the parallelism ("job/sink#3" → "job/sink"); an id without '#'
// is its own holder.
func HolderOf(writer string) string {
	g, _ := base.GroupOf(writer)
	return g
}

// Hold records that holder needs the log of each given bucket from the given
// offset on; buckets not named keep the hold they had.
func (t *Table) Hold(holder string, from map[int]uint64) error {
	for b := range from {
		if err := t.checkBucket(b); err != nil {
			return err
		}
	}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkOpen(); err != nil {
		return err
	}
	held, err := t.readHold(holder)
	if err != nil {
		return err
	}
	for b, off := range from {
		held[b] = off
	}
	raw, err := json.Marshal(held)
	if err != nil {
		return err
	}
	// Unsynced: a hold lost in a crash leaves the older, lower one.
	if err := t.db.Set(encoding.MetaKey(metaHoldPrefix+holder), raw, pebble.NoSync); err != nil {
		return fmt.Errorf("hold log of %q for %q: %w", t.dir, holder, err)
	}
	return nil
}

// ReleaseHold removes holder's holds (a writer unregistered for good, an
// exporter removed).
func (t *Table) ReleaseHold(holder string) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkOpen(); err != nil {
		return err
	}
	return t.db.Delete(encoding.MetaKey(metaHoldPrefix+holder), pebble.Sync)
}

// Holders lists, sorted, the holders that have a hold on the log.
func (t *Table) Holders() ([]string, error) {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := t.checkOpen(); err != nil {
		return nil, err
	}
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: encoding.MetaKey(metaHoldPrefix), UpperBound: encoding.MetaKey("hold0")})
	if err != nil {
		return nil, err
	}
	var out []string
	for it.First(); it.Valid(); it.Next() {
		out = append(out, strings.TrimPrefix(string(it.Key()[len(encoding.MetaKey("")):]), metaHoldPrefix))
	}
	return out, it.Close()
}

func (t *Table) readHold(holder string) (map[int]uint64, error) {
	held := map[int]uint64{}
	raw, closer, err := t.db.Get(encoding.MetaKey(metaHoldPrefix + holder))
	if errors.Is(err, pebble.ErrNotFound) {
		return held, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	if err := json.Unmarshal(raw, &held); err != nil {
		return nil, fmt.Errorf("%w: log hold of %q: %v", ErrCorrupt, holder, err)
	}
	return held, nil
}

// RetainFrom returns, per bucket, the offset below which no holder needs
// the log: the lowest hold, or the log start when a registered writer's
// holder (or any holder) has not held the bucket.
func (t *Table) RetainFrom() ([]uint64, error) {
	holders := map[string]bool{}
	t.mu.RLock()
	for w := range t.mu.writers {
		holders[HolderOf(w)] = true
	}
	t.mu.RUnlock()
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: encoding.MetaKey(metaHoldPrefix), UpperBound: encoding.MetaKey("hold0")})
	if err != nil {
		return nil, err
	}
	holds := map[string]map[int]uint64{}
	for it.First(); it.Valid(); it.Next() {
		var held map[int]uint64
		if err := json.Unmarshal(it.Value(), &held); err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("%w: log hold %q: %v", ErrCorrupt, it.Key(), err)
		}
		name := strings.TrimPrefix(string(it.Key()[len(encoding.MetaKey("")):]), metaHoldPrefix)
		holds[name] = held
		holders[name] = true
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	out := make([]uint64, t.schema.Buckets)
	for b := range out {
		start, end, err := t.LogOffsets(b)
		if err != nil {
			return nil, err
		}
		keep := end
		if len(holders) == 0 {
			keep = start // nobody declared a need: keep everything
		}
		for h := range holders {
			off, ok := holds[h][b]
			if !ok {
				off = start
			}
			keep = min(keep, off)
		}
		out[b] = keep
	}
	return out, nil
}

// TruncateHeld truncates every bucket's log below what its holders need
// (RetainFrom).
func (t *Table) TruncateHeld() error {
	from, err := t.RetainFrom()
	if err != nil {
		return err
	}
	for b, off := range from {
		if err := t.Truncate(b, off); err != nil {
			return err
		}
	}
	return nil
}
