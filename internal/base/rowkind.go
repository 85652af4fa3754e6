package base

import "fmt"

// RowKind is the change a row of a changelog makes, with Flink's names. The
// zero value is Insert, so a plain stream's rows insert. UpdateBefore and
// Delete carry a row image to take back out of the aggregates (retract);
// Insert and UpdateAfter add theirs.
//
// A table's log uses the same kinds for its entries (aggmerge.ChangeOp), and
// one more that is no row: Marker, a commit or rollback marker, as pebble's
// log-data kind is no key. A stream never carries a Marker.
type RowKind uint8

// The row kinds, and the table log's marker.
const (
	Insert       RowKind = iota // +I: a new row
	UpdateBefore                // -U: the row before an update
	UpdateAfter                 // +U: the row after an update
	Delete                      // -D: a removed row
	Marker                      // no row: a table log's commit or rollback marker
)

// Retracts reports whether the row is taken back out (-U, -D).
func (k RowKind) Retracts() bool { return k == UpdateBefore || k == Delete }

// String returns the kind's short form: +I, -U, +U, -D (as written in the
// changelog's ebbflow.op header), or "marker".
func (k RowKind) String() string {
	switch k {
	case Insert:
		return "+I"
	case UpdateBefore:
		return "-U"
	case UpdateAfter:
		return "+U"
	case Delete:
		return "-D"
	case Marker:
		return "marker"
	}
	return fmt.Sprintf("RowKind(%d)", uint8(k))
}
