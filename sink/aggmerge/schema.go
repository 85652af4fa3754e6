package aggmerge

import (
	"fmt"
	"maps"
	"strings"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// DefaultFunc is the function of a value column that names none.
const DefaultFunc = "last_non_null_value"

// DeleteBehavior says what an AGGREGATE-mode delete does.
type DeleteBehavior string

// The delete behaviours. OVERWRITE-mode deletes (undo) always apply.
const (
	DeleteIgnore DeleteBehavior = "ignore" // the delete is dropped (the default)
	DeleteReject DeleteBehavior = "reject" // the batch fails with ErrDeleteRejected
	DeleteAllow  DeleteBehavior = "allow"  // the row (or the target columns) is removed
)

// Column is one column of a table. Key columns have no function.
type Column struct {
	Name   string            `json:"name"`
	Type   agg.Type          `json:"type"`
	Func   string            `json:"agg,omitempty"`
	Params map[string]string `json:"params,omitempty"`
}

// Schema describes a table. The bucket count and every column are fixed at
// creation.
type Schema struct {
	Key     []Column       `json:"key"`
	Values  []Column       `json:"values"`
	Buckets int            `json:"buckets"`
	Delete  DeleteBehavior `json:"delete"`
}

// MaxBuckets bounds the bucket count.
const MaxBuckets = 1 << 16

// compile validates s and returns its canonical form (function names
// normalized, defaults filled in) with the bound functions.
func (s Schema) compile() (Schema, []*agg.Func, error) {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	c := Schema{Buckets: s.Buckets, Delete: s.Delete}
	if c.Delete == "" {
		c.Delete = DeleteIgnore
	}
	switch c.Delete {
	case DeleteIgnore, DeleteReject, DeleteAllow:
	default:
		fail("delete behaviour %q is not ignore, reject or allow", s.Delete)
	}
	if s.Buckets < 1 || s.Buckets > MaxBuckets {
		fail("buckets %d not in [1, %d]", s.Buckets, MaxBuckets)
	}
	if len(s.Key) == 0 {
		fail("no key columns")
	}
	if len(s.Values) == 0 {
		fail("no value columns")
	}
	seen := map[string]bool{}
	name := func(col Column) {
		switch {
		case col.Name == "":
			fail("a column has no name")
		case seen[col.Name]:
			fail("column %q appears twice", col.Name)
		}
		seen[col.Name] = true
	}
	for _, col := range s.Key {
		name(col)
		if err := col.Type.Validate(); err != nil {
			fail("key column %q: %v", col.Name, err)
		} else if col.Type.Kind == agg.KindStringSet {
			fail("key column %q: type %s cannot be a key", col.Name, col.Type)
		}
		if col.Func != "" || len(col.Params) > 0 {
			fail("key column %q has a function", col.Name)
		}
		c.Key = append(c.Key, Column{Name: col.Name, Type: col.Type})
	}
	funcs := make([]*agg.Func, 0, len(s.Values))
	for _, col := range s.Values {
		name(col)
		fn := col.Func
		if fn == "" {
			fn = DefaultFunc
		}
		f, err := agg.New(fn, col.Type, col.Params)
		if err != nil {
			fail("value column %q: %v", col.Name, err)
			continue
		}
		funcs = append(funcs, f)
		c.Values = append(c.Values, Column{Name: col.Name, Type: col.Type, Func: f.Name(), Params: f.Params()})
	}
	if len(errs) > 0 {
		return Schema{}, nil, fmt.Errorf("%w: %s", ErrSchema, strings.Join(errs, "; "))
	}
	return c, funcs, nil
}

// diff lists how the canonical schemas a (stored) and b (given) differ.
func diff(a, b Schema) []string {
	var d []string
	if a.Buckets != b.Buckets {
		d = append(d, fmt.Sprintf("buckets: stored %d, given %d", a.Buckets, b.Buckets))
	}
	if a.Delete != b.Delete {
		d = append(d, fmt.Sprintf("delete behaviour: stored %s, given %s", a.Delete, b.Delete))
	}
	d = append(d, diffColumns("key", a.Key, b.Key)...)
	return append(d, diffColumns("value", a.Values, b.Values)...)
}

func diffColumns(kind string, a, b []Column) []string {
	var d []string
	for i := 0; i < max(len(a), len(b)); i++ {
		switch {
		case i >= len(a):
			d = append(d, fmt.Sprintf("%s column %d: given %q is not stored", kind, i, b[i].Name))
		case i >= len(b):
			d = append(d, fmt.Sprintf("%s column %d: stored %q is not given", kind, i, a[i].Name))
		case a[i].Name != b[i].Name:
			d = append(d, fmt.Sprintf("%s column %d: stored %q, given %q", kind, i, a[i].Name, b[i].Name))
		default:
			x, y := a[i], b[i]
			if x.Type != y.Type {
				d = append(d, fmt.Sprintf("column %q: type stored %s, given %s", x.Name, x.Type, y.Type))
			}
			if x.Func != y.Func {
				d = append(d, fmt.Sprintf("column %q: function stored %s, given %s", x.Name, x.Func, y.Func))
			}
			if !maps.Equal(x.Params, y.Params) {
				d = append(d, fmt.Sprintf("column %q: parameters stored %v, given %v", x.Name, x.Params, y.Params))
			}
		}
	}
	return d
}

// ValueIndex returns the position of a value column, or -1.
func (s Schema) ValueIndex(name string) int {
	for i, c := range s.Values {
		if c.Name == name {
			return i
		}
	}
	return -1
}
