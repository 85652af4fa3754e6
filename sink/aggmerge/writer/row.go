package writer

import (
	"fmt"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Kind says how a row changes the table.
type Kind uint8

const (
	// Insert aggregates the row's values into the table (also +U).
	Insert Kind = iota
	// UpdateBefore retracts values previously aggregated (-U).
	UpdateBefore
	// UpdateAfter aggregates the new values of an update (+U).
	UpdateAfter
	// Delete retracts the values of a deleted input row (-D).
	Delete
)

func (k Kind) retracts() bool { return k == UpdateBefore || k == Delete }

// Row is one write to the table: the primary key and one value per target
// column, in the order of Config.Columns.
type Row struct {
	Kind Kind
	Key  []agg.Value
	Vals []agg.Value
}

// Mapper fills row from a record. It should append to row.Key[:0] and
// row.Vals[:0] so the sink reuses their memory: no allocation per record.
type Mapper[T any] func(v T, row *Row) error

func errValues(got, want int) error {
	return fmt.Errorf("aggmerge writer: %d values for %d target columns", got, want)
}
