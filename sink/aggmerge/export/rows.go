package export

import (
	"fmt"

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
// key; fn may keep both. An error from fn, or a row the table cannot
// decode, stops it and is returned.
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
	err := r.Each(func(k string, row kafka.Row) error {
		m[k] = row
		return nil
	})
	return m, err
}
