package aggmerge

import "errors"

// Errors of the table. Classify with errors.Is; agg.ErrOverflow,
// agg.ErrType and agg.ErrCannotRetract come through from the functions.
var (
	ErrSchema         = errors.New("aggmerge: invalid schema")
	ErrSchemaMismatch = errors.New("aggmerge: schema differs from the stored one")
	ErrNoTable        = errors.New("aggmerge: no table in directory")
	ErrClosed         = errors.New("aggmerge: table closed")
	ErrInvalid        = errors.New("aggmerge: invalid argument")
	ErrDeleteRejected = errors.New("aggmerge: delete rejected by the table's delete behaviour")
	ErrBeyondLogEnd   = errors.New("aggmerge: offset beyond log end")
	ErrBelowLogStart  = errors.New("aggmerge: offset below log start (truncated)")
	ErrCorrupt        = errors.New("aggmerge: corrupt table data")
	ErrNoSpace        = errors.New("aggmerge: free disk space below the table's reserve")
	ErrNotEmpty       = errors.New("aggmerge: bucket not empty")
)
