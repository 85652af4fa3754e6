package kafka

import (
	"fmt"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ChangeOp says what a decoded changelog record does. It is not a row kind:
// a record is one change (an update with both images, an upsert whose old
// row is not known yet, a tombstone that changes nothing); Change.Rows turns
// it into the rows it makes, of runtime.RowKind, the one row kind.
type ChangeOp uint8

// The changelog operations.
const (
	// ChangeInsert: a new row (Debezium "c" and "r"); After is set.
	ChangeInsert ChangeOp = iota + 1
	// ChangeUpdate: a changed row (Debezium "u"); Before and After are set.
	ChangeUpdate
	// ChangeDelete: a removed row. Before is set by Debezium "d"; an
	// upsert-json tombstone carries only the key (Normalizer fills Before).
	ChangeDelete
	// ChangeUpsert: upsert-json's new row, insert or update: which one, and
	// the old row, only a Normalizer that remembers each key's last row can
	// say.
	ChangeUpsert
	// ChangeSkip: a record that changes nothing (the tombstone that follows
	// a Debezium delete, for compaction).
	ChangeSkip
)

func (o ChangeOp) String() string {
	switch o {
	case ChangeInsert:
		return "insert"
	case ChangeUpdate:
		return "update"
	case ChangeDelete:
		return "delete"
	case ChangeUpsert:
		return "upsert"
	case ChangeSkip:
		return "skip"
	}
	return fmt.Sprintf("ChangeOp(%d)", uint8(o))
}

// Change is one decoded changelog record. RawKey is the record key as
// written (the state key of a Normalizer); Key is it decoded.
type Change struct {
	Op            ChangeOp
	RawKey        []byte
	Key           Row
	Before, After Row
	// Record is the record the change was decoded from: where it was read
	// (for a dead letter of a change that fails downstream).
	Record *kgo.Record
}

// Rows calls fn with the +I/-U/+U/-D rows of c: an insert gives +I, an
// update -U then +U, a delete -D (nothing when its old row is unknown). An
// upsert gives +U alone: pass it through a Normalizer first to get -U.
func (c Change) Rows(fn func(runtime.RowKind, Row) error) error {
	switch c.Op {
	case ChangeInsert:
		return fn(runtime.RowInsert, c.After)
	case ChangeUpdate:
		if err := fn(runtime.RowUpdateBefore, c.Before); err != nil {
			return err
		}
		return fn(runtime.RowUpdateAfter, c.After)
	case ChangeDelete:
		if c.Before.Len() == 0 {
			return nil
		}
		return fn(runtime.RowDelete, c.Before)
	case ChangeUpsert:
		return fn(runtime.RowUpdateAfter, c.After)
	}
	return nil
}

// Normalizer derives exact changes from upsert records by remembering the
// last row of every key in memory: see normalizeChange. For a job, where that
// memory must be checkpointed, use NormalizeChanges.
type Normalizer struct {
	last mapMemory
}

// Normalize returns c as an exact change; ok is false when c changes
// nothing.
func (n *Normalizer) Normalize(c Change) (Change, bool) {
	if n.last == nil {
		n.last = mapMemory{}
	}
	c, ok, _ := normalizeChange(n.last, c) // a map never fails
	return c, ok
}

// Len returns the number of keys remembered.
func (n *Normalizer) Len() int { return len(n.last) }

// rowMemory is the last row of every key, by raw record key.
type rowMemory interface {
	get(key string) (Row, bool, error)
	put(key string, r Row) error
	del(key string) error
}

type mapMemory map[string]Row

func (m mapMemory) get(k string) (Row, bool, error) { r, ok := m[k]; return r, ok, nil }
func (m mapMemory) put(k string, r Row) error       { m[k] = r.Clone(); return nil }
func (m mapMemory) del(k string) error              { delete(m, k); return nil }

// normalizeChange is Flink's ChangelogNormalize: an upsert of a new key is an
// insert, of a known key an update with the remembered row as Before
// (nothing when the row is the same), and a tombstone of a known key a
// delete with Before (nothing for an unknown key). Inserts, updates and
// deletes with their rows pass through and update the memory.
func normalizeChange(m rowMemory, c Change) (Change, bool, error) {
	k := string(c.RawKey)
	prev, known, err := m.get(k)
	if err != nil {
		return c, false, err
	}
	switch c.Op {
	case ChangeUpsert:
		if known && sameRow(prev, c.After) {
			return c, false, nil
		}
		if err := m.put(k, c.After); err != nil {
			return c, false, err
		}
		if !known {
			c.Op = ChangeInsert
			return c, true, nil
		}
		c.Op, c.Before = ChangeUpdate, prev
		return c, true, nil
	case ChangeDelete:
		if !known {
			return c, c.Before.Len() > 0, nil
		}
		if c.Before.Len() == 0 {
			c.Before = prev
		}
		return c, true, m.del(k)
	case ChangeInsert, ChangeUpdate:
		return c, true, m.put(k, c.After)
	}
	return c, false, nil
}

func sameRow(a, b Row) bool {
	return string(appendObject(nil, a.fields)) == string(appendObject(nil, b.fields))
}
