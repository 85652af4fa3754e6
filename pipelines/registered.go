package pipelines

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Registry holds the components a Go program adds to the built-in ones
// (Components), each under a YAML key of its own: pass it to Load
// (Options.Registry), and pipelines/build wires the jobs that use them like
// any other. A Registry is filled before Load and not changed afterwards.
type Registry struct {
	sources []*registeredSource
}

// SourceKind is a kind of source registered from Go (RegisterSource). S is
// its spec: a struct decoded from the file the way the built-in specs are,
// led by the same tags (yaml, default, required, min, max, form; see
// decode.go) and refusing unknown keys, every problem placed at
// file:line:col.
type SourceKind[S any] struct {
	// Check validates a decoded spec, reporting each problem with c.Fail,
	// and returns the fields of the source's records in the order New's
	// records hold their values. A spec with problems may return nil.
	Check func(c *Check, spec *S) []Field
	// New returns the subtasks of the source for a job built from the file
	// (called once per job). A record is the values of Check's fields, in
	// order, each nil or of the Go type a Row holds for its field's type
	// (see Row); the source checkpoints its own positions, as every
	// runtime.Source does, so that a restored job replays exactly.
	New func(spec *S) func() runtime.Source[[]any]
}

// registeredSource is a SourceKind with its spec type erased.
type registeredSource struct {
	kind     sourceKind
	specType reflect.Type
	check    func(c *Check, spec any) []Field
	new      func(spec any) func() runtime.Source[[]any]
}

// Registered is a component of a kind registered from Go, as decoded.
type Registered struct {
	Kind string // the kind's key
	Spec any    // a *S of the kind's SourceKind[S]
	// fields are what Check returned; src is the kind.
	fields []Field
	src    *registeredSource
}

// ErrRegister marks a component that cannot be registered.
var ErrRegister = errors.New("pipelines: cannot register component")

// RegisterSource adds a kind of source called name (its key in a file:
// source: {<name>: {...}}). The name must be a plain key (letters, digits,
// '_' and '-'), neither a built-in component nor registered before; S must
// be a struct type the decoder can fill.
func RegisterSource[S any](r *Registry, name string, k SourceKind[S]) error {
	t := reflect.TypeFor[S]()
	if err := r.checkName(name); err != nil {
		return err
	}
	if k.Check == nil || k.New == nil {
		return fmt.Errorf("%w: source %q: Check and New are required", ErrRegister, name)
	}
	if err := checkSpecType(t); err != nil {
		return fmt.Errorf("%w: source %q: spec %s: %w", ErrRegister, name, t, err)
	}
	rs := &registeredSource{specType: t,
		check: func(c *Check, spec any) []Field { return k.Check(c, spec.(*S)) },
		new:   func(spec any) func() runtime.Source[[]any] { return k.New(spec.(*S)) }}
	rs.kind = sourceKind{component: component{name}, // given: Source.kind finds it by Source.Registered
		check:     rs.validate,
		cluster:   func(*Source) *Connection { return nil },
		changelog: func(*Source) Format { return "" }}
	r.sources = append(r.sources, rs)
	return nil
}

func (r *Registry) checkName(name string) error {
	if !identPattern.MatchString(name) && !namePattern.MatchString(name) || name == "name" {
		return fmt.Errorf("%w: %q is not a key (letters, digits, '_' and '-')", ErrRegister, name)
	}
	if slices.Contains(Components(RoleSource), name) || r.source(name) != nil {
		return fmt.Errorf("%w: source %q exists already", ErrRegister, name)
	}
	return nil
}

// source returns the registered source kind called name, or nil.
func (r *Registry) source(name string) *registeredSource {
	if r == nil {
		return nil
	}
	for _, s := range r.sources {
		if s.kind.name == name {
			return s
		}
	}
	return nil
}

// sourceNames lists the registered source kinds, in registration order.
func (r *Registry) sourceNames() []string {
	if r == nil {
		return nil
	}
	out := make([]string, len(r.sources))
	for i, s := range r.sources {
		out[i] = s.kind.name
	}
	return out
}

// validate runs the kind's Check on a decoded spec at path and checks the
// fields it returns.
func (rs *registeredSource) validate(v *validator, path string, s *Source) ([]Field, bool) {
	before := len(v.errs)
	c := &Check{v: v, path: path}
	fields := rs.check(c, s.Registered.Spec)
	if len(v.errs) > before {
		return nil, false
	}
	if len(fields) == 0 {
		v.fail(path, "the source gives no fields (its Check returned none)")
		return nil, false
	}
	ok := true
	for i, f := range fields {
		switch {
		case !identPattern.MatchString(f.Name):
			v.fail(path, "the source's field %q is not an identifier (letters, digits and _, not starting with a digit)", f.Name)
			ok = false
		case slices.ContainsFunc(fields[:i], func(g Field) bool { return g.Name == f.Name }):
			v.fail(path, "the source gives field %q twice", f.Name)
			ok = false
		case f.Type.Kind == agg.KindInvalid:
			v.fail(path, "the source's field %q has no type", f.Name)
			ok = false
		}
	}
	if !ok {
		return nil, false
	}
	s.Registered.fields = fields
	return fields, true
}

// Check is where a registered component's Check reports the problems of its
// spec; each is placed at its node in the file, as file:line:col:
// source.<kind>.<path>: message, among the file's other errors.
type Check struct {
	v    *validator
	path string // the spec's
}

// Fail records a problem at path, a key inside the spec as in error
// messages ("count", "words[1]", "range.max"; "" for the spec itself). A
// path the file does not give is placed at its nearest given parent.
func (c *Check) Fail(path, format string, args ...any) {
	c.v.fail(join(c.path, path), format, args...)
}

// Given reports whether the file gives a value at path inside the spec
// (rather than the default).
func (c *Check) Given(path string) bool { return c.v.given(join(c.path, path)) }

// RegisteredSource returns, for source i of p when its kind is registered
// from Go, the factory of its subtasks and the function that places one of
// its records in a Row (refusing a value of the wrong Go type); ok is false
// for a built-in kind.
func (p *Pipeline) RegisteredSource(i int) (subtasks func() runtime.Source[[]any], row func([]any) (Row, error), ok bool) {
	reg := p.Spec.Sources[i].Registered
	if reg == nil || reg.src == nil {
		return nil, nil, false
	}
	slots := make([]int, len(reg.fields))
	for j, f := range reg.fields {
		sf, _ := p.Input.Field(f.Name) // every source gives the input's fields
		slots[j] = sf.Slot
	}
	fields, width := reg.fields, p.Width
	row = func(vals []any) (Row, error) {
		if len(vals) != len(fields) {
			return nil, fmt.Errorf("source %s: a record of %d values, want %d (%s)", reg.Kind, len(vals), len(fields), fieldNames(fields))
		}
		r := make(Row, width)
		for j, v := range vals {
			if _, err := AggValue(fields[j].Type, v); err != nil {
				return nil, fmt.Errorf("source %s: field %s: %w", reg.Kind, fields[j].Name, err)
			}
			r[slots[j]] = v
		}
		return r, nil
	}
	return reg.src.new(reg.Spec), row, true
}

func fieldNames(fs []Field) string {
	var s []byte
	for i, f := range fs {
		if i > 0 {
			s = append(s, ", "...)
		}
		s = append(s, f.Name...)
	}
	return string(s)
}

// checkSpecType reports what in spec type t the decoder cannot fill: it
// must be a struct whose keyed fields are scalars (string, bool, int,
// int64, float64, or a TextUnmarshaler), structs, pointers to them, lists
// and string-keyed maps of them; a default must parse.
func checkSpecType(t reflect.Type) error {
	if t.Kind() != reflect.Struct {
		return errors.New("not a struct")
	}
	return checkFields(t, map[reflect.Type]bool{})
}

func checkFields(t reflect.Type, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	for _, f := range fieldsOf(t) {
		ft := t.FieldByIndex(f.index).Type
		if err := checkDecodable(ft, f, seen); err != nil {
			return fmt.Errorf("key %q: %w", f.key, err)
		}
		if f.hasDef {
			if !reflect.PointerTo(ft).Implements(textUnmarshaler) && !isScalarKind(ft.Kind()) {
				return fmt.Errorf("key %q: a default needs a scalar, not a %s", f.key, ft)
			}
			if err := setScalar(reflect.New(ft).Elem(), f.def); err != nil {
				return fmt.Errorf("key %q: default %q: %w", f.key, f.def, err)
			}
		}
	}
	return nil
}

func checkDecodable(t reflect.Type, f fieldInfo, seen map[reflect.Type]bool) error {
	if reflect.PointerTo(t).Implements(textUnmarshaler) || isScalarKind(t.Kind()) {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkDecodable(t.Elem(), f, seen)
	case reflect.Struct:
		return checkFields(t, seen)
	case reflect.Slice:
		if f.form == "map" {
			return nil // the element's key and value tags are the decoder's to check
		}
		return checkDecodable(t.Elem(), fieldInfo{}, seen)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return fmt.Errorf("a map's keys must be strings, not %s", t.Key())
		}
		return checkDecodable(t.Elem(), fieldInfo{}, seen)
	}
	return fmt.Errorf("the decoder cannot fill a %s", t)
}
