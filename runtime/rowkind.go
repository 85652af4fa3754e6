package runtime

import "fmt"

// RowKind is the change a row of a changelog stream makes, with Flink's
// names. The zero value is RowInsert, so a plain stream's rows insert.
// RowUpdateBefore and RowDelete carry a row image to take back out of the
// aggregates (retract); the others add theirs. The Kafka source's changelog
// formats produce them, pipelines carry them through their steps, and the
// table writer retracts on them.
type RowKind uint8

// The row kinds.
const (
	RowInsert       RowKind = iota // +I
	RowUpdateBefore                // -U
	RowUpdateAfter                 // +U
	RowDelete                      // -D
)

// Retracts reports whether the row is taken back out (-U, -D).
func (k RowKind) Retracts() bool { return k == RowUpdateBefore || k == RowDelete }

func (k RowKind) String() string {
	switch k {
	case RowInsert:
		return "+I"
	case RowUpdateBefore:
		return "-U"
	case RowUpdateAfter:
		return "+U"
	case RowDelete:
		return "-D"
	}
	return fmt.Sprintf("RowKind(%d)", uint8(k))
}
