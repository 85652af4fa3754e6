package runtime

import "github.com/ebbflow/ebbflow/internal/base"

// RowKind is the change a row of a changelog stream makes, with Flink's
// names. The zero value is RowInsert, so a plain stream's rows insert.
// RowUpdateBefore and RowDelete carry a row image to take back out of the
// aggregates (retract); the others add theirs. The Kafka source's changelog
// formats produce them, pipelines carry them through their steps, and the
// table writer retracts on them. It is the one row kind of ebbflow (the
// table's aggmerge.ChangeOp is the same type).
type RowKind = base.RowKind

// The row kinds.
const (
	RowInsert       = base.Insert       // +I
	RowUpdateBefore = base.UpdateBefore // -U
	RowUpdateAfter  = base.UpdateAfter  // +U
	RowDelete       = base.Delete       // -D
)
