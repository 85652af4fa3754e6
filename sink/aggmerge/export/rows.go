package export

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ebbflow/ebbflow/operators/kafka"
	"github.com/ebbflow/ebbflow/sink/aggmerge"
)

// Rows are a table's rows at a version: the record key (the primary key
// as JSON, as the changelog writes it) → the row. Read from the changelog
// they are a map; read from the hosting runner's table (Exporter.RowsAt)
// they stay as the table encodes them and each row is made as it is read
// (Each): the snapshot costs their copy, not 100k kafka.Rows built into a
// map (that was most of a snapshot's CPU). The zero Rows is empty. Rows
// are immutable: readers may share them.
type Rows struct {
	m      map[string]kafka.Row
	set    *aggmerge.RowSet
	schema *aggmerge.Schema // of set's table
}

// Len returns the number of rows.
func (r Rows) Len() int {
	if r.set != nil {
		return r.set.Len()
	}
	return len(r.m)
}

// Each calls fn for every row, in no particular order, with its record
// key. The key and the row are valid only during the call (the table's
// are made into reused memory); Map and Sorted keep them. An error from
// fn, or a row the table cannot decode, stops it and is returned.
func (r Rows) Each(fn func(key string, row kafka.Row) error) error {
	if r.set == nil {
		for k, row := range r.m {
			if err := fn(k, row); err != nil {
				return err
			}
		}
		return nil
	}
	m := newRowMaker(r.schema)
	return r.set.Each(func(_ []byte, tr aggmerge.Row) error {
		row, err := m.row(tr.Key, tr.Values)
		if err != nil {
			return fmt.Errorf("row %v: %w", tr.Key, err)
		}
		return fn(m.key(tr.Key), row)
	})
}

// Map returns the rows as a map: the one read from the changelog (shared:
// do not change it), or one made of the table's rows.
func (r Rows) Map() (map[string]kafka.Row, error) {
	if r.set == nil {
		return r.m, nil
	}
	m := make(map[string]kafka.Row, r.set.Len())
	var k keeper
	err := r.Each(func(key string, row kafka.Row) error {
		m[strings.Clone(key)] = k.row(row)
		return nil
	})
	return m, err
}

// Sorted returns the rows sorted by record key.
func (r Rows) Sorted() ([]kafka.Row, error) {
	type keyed struct {
		key string
		row kafka.Row
	}
	all := make([]keyed, 0, r.Len())
	var k keeper
	err := r.Each(func(key string, row kafka.Row) error {
		all = append(all, keyed{strings.Clone(key), k.row(row)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	rows := make([]kafka.Row, len(all))
	for i := range all {
		rows[i] = all[i].row
	}
	return rows, nil
}

// keeper keeps the rows Each hands out: their fields copied out of the
// reused slice (the values in them are not reused, see rowMaker).
type keeper struct{ rows kafka.RowBuilder }

func (k *keeper) row(r kafka.Row) kafka.Row { return k.rows.Row(r.Fields()...) }
