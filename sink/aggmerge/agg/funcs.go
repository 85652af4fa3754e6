package agg

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Errors of the functions. Classify with errors.Is.
var (
	ErrType          = errors.New("agg: type mismatch")
	ErrOverflow      = errors.New("agg: overflow")
	ErrCannotRetract = errors.New("agg: cannot retract")
	ErrUnknownFunc   = errors.New("agg: unknown function")
	ErrCorruptInput  = errors.New("agg: corrupt input")
)

// TypeError is New's refusal of a column type the function does not accept.
// It wraps ErrType; errors.As gives the details.
type TypeError struct {
	Func    string // the function
	Type    Type   // the refused type
	Accepts []Kind // the kinds the function accepts
}

func (e *TypeError) Error() string { return ErrType.Error() + ": " + e.Reason() }

func (e *TypeError) Unwrap() error { return ErrType }

// Reason is the error without the package's prefix, for a caller that
// places it itself (at a position in a job file).
func (e *TypeError) Reason() string {
	return fmt.Sprintf("%s does not accept %s (accepts %s)", e.Func, e.Type, kindList(e.Accepts))
}

// ParamError is New's refusal of a parameter: one the function does not
// have (Problem empty), or a value it cannot take. errors.As gives it.
type ParamError struct {
	Func    string // the function
	Param   string // the parameter
	Problem string // what is wrong with the value, e.g. "must not be empty"
}

func (e *ParamError) Error() string { return "agg: " + e.Reason() }

// Reason is the error without the package's prefix, for a caller that
// places it itself (at a position in a job file).
func (e *ParamError) Reason() string {
	if e.Problem == "" {
		return fmt.Sprintf("function %s has no parameter %q", e.Func, e.Param)
	}
	return fmt.Sprintf("function %s: parameter %s %s", e.Func, e.Param, e.Problem)
}

// Func is an aggregate function bound to a column type and its parameters.
// Merge folds an input into the accumulator; Retract applies the inverse
// (nil when the function cannot retract). Neither modifies its arguments.
type Func struct {
	def     *def
	typ     Type
	params  map[string]string
	merge   func(acc, in Value) (Value, error)
	retract func(acc, in Value) (Value, error)
}

// Name returns the canonical function name.
func (f *Func) Name() string { return f.def.name }

// Type returns the column type the function is bound to.
func (f *Func) Type() Type { return f.typ }

// Params returns a copy of the function's parameters.
func (f *Func) Params() map[string]string {
	if len(f.params) == 0 {
		return nil
	}
	m := make(map[string]string, len(f.params))
	for k, v := range f.params {
		m[k] = v
	}
	return m
}

// Merge returns acc aggregated with in.
func (f *Func) Merge(acc, in Value) (Value, error) { return f.merge(acc, in) }

// CanRetract reports whether Retract is supported.
func (f *Func) CanRetract() bool { return f.retract != nil }

// Retract returns acc with in taken back out.
func (f *Func) Retract(acc, in Value) (Value, error) {
	if f.retract == nil {
		return Value{}, fmt.Errorf("%w: function %s", ErrCannotRetract, f.def.name)
	}
	return f.retract(acc, in)
}

// Idempotent reports whether merging an input again, whatever was merged
// since, changes nothing: Merge(Merge(Merge(a, x), y), x) ==
// Merge(Merge(a, x), y) (and so Merge(Merge(a, x), x) == Merge(a, x)).
// Replaying inputs that were merged already then never changes a value, not
// even for a moment, which is what lets a writer of only such functions skip
// undo. last_value is not: replaying x after y sets the value back to x
// until y is replayed too.
func (f *Func) Idempotent() bool { return f.def.idempotent }

// Associative reports whether Merge(Merge(a, x), y) == Merge(a, Merge(x, y)),
// so that inputs may be pre-aggregated.
func (f *Func) Associative() bool { return f.def.associative }

// Commutative reports whether the partials of two sets of inputs combine
// to the same value in either order: Combine(p, q) == Combine(q, p). A
// session window that merges two sessions whose records interleaved in
// arrival order combines their partials, which is exact only for such a
// function; first_value, last_value and listagg depend on the order.
func (f *Func) Commutative() bool { return f.def.commutative }

// def describes one function: the types it accepts, its parameters and its
// laws, and builds its merge and retract for a column type.
type def struct {
	name        string
	aliases     []string
	kinds       []Kind
	params      map[string]string // name -> default
	idempotent  bool
	associative bool
	commutative bool
	retracts    bool
	build       func(t Type, p map[string]string) (merge, retract func(acc, in Value) (Value, error), err error)
	work        func(first Value) (working, error) // nil, or the Accumulator's in-memory form from a first non-null partial
}

var (
	numericKinds = []Kind{KindInt64, KindFloat64, KindDecimal}
	orderedKinds = []Kind{KindInt64, KindFloat64, KindDecimal, KindString, KindTimestamp}
	allKinds     = []Kind{KindBool, KindInt64, KindFloat64, KindDecimal, KindString, KindBytes, KindTimestamp, KindStringSet}
)

var defs = []*def{
	{name: "sum", kinds: numericKinds, associative: true, retracts: true, commutative: true, build: buildSum},
	{name: "product", kinds: numericKinds, associative: true, retracts: true, commutative: true, build: buildProduct},
	{name: "count", kinds: []Kind{KindInt64}, retracts: true, commutative: true, build: buildCount},
	{name: "max", kinds: orderedKinds, idempotent: true, associative: true, commutative: true, build: buildPick(+1)},
	{name: "min", kinds: orderedKinds, idempotent: true, associative: true, commutative: true, build: buildPick(-1)},
	{name: "last_value", kinds: allKinds, associative: true, retracts: true, build: buildLast(false)},
	{name: "last_non_null_value", aliases: []string{"last_value_ignore_nulls"}, kinds: allKinds, associative: true, retracts: true, build: buildLast(true)},
	{name: "first_value", kinds: allKinds, idempotent: true, associative: true, build: buildFirst(false)},
	{name: "first_non_null_value", aliases: []string{"first_value_ignore_nulls"}, kinds: allKinds, idempotent: true, associative: true, build: buildFirst(true)},
	{name: "listagg", aliases: []string{"string_agg"}, kinds: []Kind{KindString}, params: map[string]string{"delimiter": ","}, associative: true, build: buildListagg},
	{name: "bool_and", kinds: []Kind{KindBool}, idempotent: true, associative: true, commutative: true, build: buildBool(true)},
	{name: "bool_or", kinds: []Kind{KindBool}, idempotent: true, associative: true, commutative: true, build: buildBool(false)},
	{name: "collect_set", kinds: []Kind{KindStringSet}, idempotent: true, associative: true, commutative: true, build: buildCollectSet},
	{name: "rbm32", kinds: []Kind{KindBytes}, idempotent: true, associative: true, commutative: true, build: buildRBM32, work: rbm32.start},
	{name: "rbm64", kinds: []Kind{KindBytes}, idempotent: true, associative: true, commutative: true, build: buildRBM64, work: rbm64.start},
	{name: "hll", kinds: []Kind{KindBytes}, idempotent: true, associative: true, commutative: true, build: buildHLL, work: hll.start},
}

// Normalize returns the canonical spelling of a function name or alias:
// lower case, '-' read as '_'. Unknown names are returned normalized.
func Normalize(name string) string {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "-", "_")
	if d := lookup(n); d != nil {
		return d.name
	}
	return n
}

func lookup(n string) *def {
	for _, d := range defs {
		if d.name == n || slices.Contains(d.aliases, n) {
			return d
		}
	}
	return nil
}

// Names returns the canonical names of all functions.
func Names() []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.name
	}
	return out
}

// New binds the function called name (or an alias) to a column type and
// parameters, checking that the function accepts the type and knows every
// parameter. Missing parameters take their defaults.
func New(name string, t Type, params map[string]string) (*Func, error) {
	d := lookup(strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "-", "_"))
	if d == nil {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownFunc, name, strings.Join(Names(), ", "))
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if !slices.Contains(d.kinds, t.Kind) {
		return nil, &TypeError{Func: d.name, Type: t, Accepts: d.kinds}
	}
	p := make(map[string]string, len(d.params))
	for k, v := range d.params {
		p[k] = v
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := d.params[k]; !ok {
			return nil, &ParamError{Func: d.name, Param: k}
		}
		p[k] = params[k]
	}
	merge, retract, err := d.build(t, p)
	var pe *ParamError
	if errors.As(err, &pe) {
		pe.Func = d.name
		return nil, pe
	}
	if err != nil {
		return nil, fmt.Errorf("agg: function %s: %w", d.name, err)
	}
	if !d.retracts {
		retract = nil
	}
	return &Func{def: d, typ: t, params: p, merge: merge, retract: retract}, nil
}

func kindList(ks []Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = k.String()
	}
	return strings.Join(s, ", ")
}
