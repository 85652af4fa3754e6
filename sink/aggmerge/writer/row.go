package writer

import (
	"fmt"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Row is one write to the table: the primary key and one value per target
// column, in the order of Config.Columns.
type Row struct {
	Kind runtime.RowKind // RowInsert and RowUpdateAfter aggregate, RowUpdateBefore and RowDelete retract
	Key  []agg.Value
	Vals []agg.Value
}

// Mapper fills row from a record. It should append to row.Key[:0] and
// row.Vals[:0] so the sink reuses their memory: no allocation per record.
type Mapper[T any] func(v T, row *Row) error

func errValues(got, want int) error {
	return fmt.Errorf("aggmerge writer: %d values for %d target columns", got, want)
}
