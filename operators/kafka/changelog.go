package kafka

import (
	"errors"
	"fmt"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ChangeOp says what a decoded changelog record does.
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

var (
	errNoKey        = errors.New("changelog record has no key")
	errBeforeNeeded = errors.New(`debezium-json: "before" is null on an update or delete (the source must log full before-images)`)
)

// UpsertJSON decodes upsert-json changelog records (the Kafka Streams,
// ksqlDB and Flink upsert-kafka convention): the key is a JSON object, the
// value the full row as a JSON object, or null for a delete. Each record
// decodes to a ChangeUpsert or a ChangeDelete without Before; a Normalizer
// turns them into exact inserts, updates and deletes.
func UpsertJSON() Format[Change] {
	return func() Decoder[Change] {
		d := &rowDecoder{}
		return func(r *kgo.Record) (Change, error) {
			c, err := decodeKey(d, r)
			if err != nil {
				return c, err
			}
			c.Record = r
			if r.Value == nil {
				c.Op = ChangeDelete
				return c, nil
			}
			if c.After, err = d.decode(r.Value); err != nil {
				return c, fmt.Errorf("upsert-json value: %w", err)
			}
			c.Op = ChangeUpsert
			return c, nil
		}
	}
}

// DebeziumJSON decodes Debezium JSON envelopes, {"before", "after", "op",
// ...}, optionally wrapped in {"schema", "payload"}: op "c" and "r" give
// ChangeInsert, "u" ChangeUpdate, "d" ChangeDelete. As in Flink, an update
// or delete without "before" is an error. A null value (the tombstone after
// a delete) gives ChangeSkip. The key is optional.
func DebeziumJSON() Format[Change] {
	return func() Decoder[Change] {
		d := &rowDecoder{}
		return func(r *kgo.Record) (Change, error) {
			c, err := decodeKey(d, r)
			if err != nil && !errors.Is(err, errNoKey) {
				return c, err
			}
			c.Record = r
			if r.Value == nil {
				c.Op = ChangeSkip
				return c, nil
			}
			env, err := d.decode(r.Value)
			if err != nil {
				return c, fmt.Errorf("debezium-json value: %w", err)
			}
			if p, ok := env.Get("payload"); ok && p.Kind() == Object {
				env = Row{fields: p.kids}
			}
			op, _ := env.Get("op")
			s, _ := op.Str()
			before, hasBefore := objectField(env, "before")
			after, hasAfter := objectField(env, "after")
			c.Before, c.After = before, after
			switch s {
			case "c", "r":
				c.Op = ChangeInsert
				if !hasAfter {
					return c, fmt.Errorf(`debezium-json: op %q without "after"`, s)
				}
			case "u":
				c.Op = ChangeUpdate
				if !hasAfter {
					return c, fmt.Errorf(`debezium-json: op "u" without "after"`)
				}
				if !hasBefore {
					return c, errBeforeNeeded
				}
			case "d":
				c.Op = ChangeDelete
				if !hasBefore {
					return c, errBeforeNeeded
				}
			default:
				return c, fmt.Errorf("debezium-json: unknown op %q", s)
			}
			return c, nil
		}
	}
}

func decodeKey(d *rowDecoder, r *kgo.Record) (Change, error) {
	if r.Key == nil {
		return Change{}, errNoKey
	}
	k, err := d.decode(r.Key)
	if err != nil {
		return Change{}, fmt.Errorf("changelog key: %w", err)
	}
	return Change{RawKey: r.Key, Key: k}, nil
}

// objectField returns the named member of r when it is an object.
func objectField(r Row, name string) (Row, bool) {
	v, ok := r.Get(name)
	if !ok || v.Kind() != Object {
		return Row{}, false
	}
	return Row{fields: v.kids}, true
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
