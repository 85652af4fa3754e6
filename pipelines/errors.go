package pipelines

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Error is one problem in a job file, at the position of the offending node.
// Line and Column are 1-based; File is "--set" for an override.
type Error struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	Path   string `json:"path"`
	Msg    string `json:"message"`
}

// Error formats e as file:line:col: path: message, which editors can follow.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a load, sorted by file and position.
// Load returns it (as an error) when any problem was found.
type Errors []*Error

// Error joins the messages, one a line.
func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// sort orders the errors by file, line, column, then message, and drops
// exact duplicates (one node can be reached twice, e.g. through an alias).
func (es Errors) sort() Errors {
	slices.SortStableFunc(es, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Column, b.Column), cmp.Compare(a.Path, b.Path), cmp.Compare(a.Msg, b.Msg))
	})
	return slices.CompactFunc(es, func(a, b *Error) bool { return *a == *b })
}

// suggest returns " (did you mean %q?)" for the candidate closest to s, if
// one is a plausible typo of it (a few edits, or one contains the other).
func suggest(s string, candidates []string) string {
	ls := strings.ToLower(s)
	best, bestD := "", max(1, len(s)/3)+1
	for _, c := range candidates {
		d := editDistance(ls, c)
		if len(ls) >= 3 && len(c) >= 3 && (strings.Contains(c, ls) || strings.Contains(ls, c)) {
			d = min(d, max(1, len(s)/3))
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the optimal string alignment distance of a and b over
// bytes: insertions, deletions, substitutions and swaps of neighbours.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
