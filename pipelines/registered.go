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
// (Components), kinds of source and of step (RegisterSource,
// RegisterTransform), each under a YAML key of its own: pass it to Load
// (Options.Registry), and pipelines/build wires the jobs that use them like
// any other. A Registry is filled before Load and not changed afterwards.
type Registry struct {
	sources    []*registeredSource
	transforms []*registeredTransform
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

// TransformKind is a kind of step registered from Go (RegisterTransform),
// with its spec S as for a SourceKind.
type TransformKind[S any] struct {
	// Check validates a decoded spec against the fields before the step,
	// reporting each problem with c.Fail, and returns the fields the step
	// writes: new ones, or ones of in it replaces (with their types).
	Check func(c *Check, spec *S, in []Field) []Field
	// New returns the step for one goroutine (a job runs its steps in
	// several), in being the fields before it as Check saw them: given
	// their values (in's order; the slice is reused, do not keep it), it
	// returns the values of the fields it writes (Check's order, of the Go
	// types a Row holds), or keep false to drop the record. An error goes
	// to the source's on_error policy, as a failed expression does.
	New func(spec *S, in []Field) func(values []any) (out []any, keep bool, err error)
}

// registeredTransform is a TransformKind with its spec type erased.
type registeredTransform struct {
	kind     transformKind
	specType reflect.Type
	check    func(c *Check, spec any, in []Field) []Field
	new      func(spec any, in []Field) func([]any) ([]any, bool, error)
}

// Registered is a component of a kind registered from Go, as decoded.
type Registered struct {
	Kind string // the kind's key
	Spec any    // a *S of the kind's SourceKind[S] or TransformKind[S]
	// fields are what a source's Check returned; src or step is the kind.
	fields []Field
	src    *registeredSource
	step   *registeredTransform
}

// ErrRegister marks a component that cannot be registered.
var ErrRegister = errors.New("pipelines: cannot register component")

// RegisterSource adds a kind of source called name (its key in a file:
// source: {<name>: {...}}). The name must be a plain key (letters, digits,
// '_' and '-'), neither a built-in component nor registered before; S must
// be a struct type the decoder can fill.
func RegisterSource[S any](r *Registry, name string, k SourceKind[S]) error {
	t := reflect.TypeFor[S]()
	if err := r.refuse(RoleSource, name, t, k.Check != nil && k.New != nil); err != nil {
		return err
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

// RegisterTransform adds a kind of step called name (its key in a file:
// transforms: [{<name>: {...}}]), under the rules of RegisterSource.
func RegisterTransform[S any](r *Registry, name string, k TransformKind[S]) error {
	t := reflect.TypeFor[S]()
	if err := r.refuse(RoleTransform, name, t, k.Check != nil && k.New != nil); err != nil {
		return err
	}
	rt := &registeredTransform{specType: t,
		check: func(c *Check, spec any, in []Field) []Field { return k.Check(c, spec.(*S), in) },
		new:   func(spec any, in []Field) func([]any) ([]any, bool, error) { return k.New(spec.(*S), in) }}
	rt.kind = transformKind{component: component{name}, check: rt.validate} // given: Transform.kind finds it by Transform.Registered
	r.transforms = append(r.transforms, rt)
	return nil
}

// refuse returns why a kind of role called name, with spec type t, cannot
// be registered (complete: it has its Check and New), or nil: the name must
// be a plain key, not taken by any component, built-in or registered, of
// any role.
func (r *Registry) refuse(role Role, name string, t reflect.Type, complete bool) error {
	switch {
	case !identPattern.MatchString(name) && !namePattern.MatchString(name) || name == "name":
		return fmt.Errorf("%w: %q is not a key (letters, digits, '_' and '-')", ErrRegister, name)
	case slices.Contains(Components(RoleSource), name) || slices.Contains(Components(RoleTransform), name) ||
		r.source(name) != nil || r.transform(name) != nil:
		return fmt.Errorf("%w: %q exists already", ErrRegister, name)
	case !complete:
		return fmt.Errorf("%w: %s %q: Check and New are required", ErrRegister, role, name)
	}
	if err := checkSpecType(t); err != nil {
		return fmt.Errorf("%w: %s %q: spec %s: %w", ErrRegister, role, name, t, err)
	}
	return nil
}

func (rs *registeredSource) key() string    { return rs.kind.name }
func (rt *registeredTransform) key() string { return rt.kind.name }

// find returns the kind called name, or nil.
func find[K interface {
	comparable
	key() string
}](kinds []K, name string) K {
	var none K
	for _, k := range kinds {
		if k.key() == name {
			return k
		}
	}
	return none
}

// The registered kinds of each role by name, and their names in
// registration order; a nil Registry has none.
func (r *Registry) source(name string) *registeredSource {
	if r == nil {
		return nil
	}
	return find(r.sources, name)
}

func (r *Registry) transform(name string) *registeredTransform {
	if r == nil {
		return nil
	}
	return find(r.transforms, name)
}

func (r *Registry) sourceNames() []string {
	if r == nil {
		return nil
	}
	return names(r.sources)
}

func (r *Registry) transformNames() []string {
	if r == nil {
		return nil
	}
	return names(r.transforms)
}

// validate runs the kind's Check on a decoded spec at path against the
// schema before the step, and makes the step: each field it writes gets a
// slot of its own, as a map's do.
func (rt *registeredTransform) validate(v *validator, path string, t *Transform, in *Schema, step *Step) {
	ins := make([]Field, len(in.Fields))
	for i, f := range in.Fields {
		ins[i] = Field{Name: f.Name, Type: f.Type}
	}
	before := len(v.errs)
	outs := rt.check(&Check{v: v, path: path}, t.Registered.Spec, ins)
	if len(v.errs) > before {
		for _, f := range outs {
			v.broken[f.Name] = true
		}
		return
	}
	if !checkFieldList(v, path, "step", outs, true) {
		return
	}
	rs := &RegisteredStep{kind: rt, spec: t.Registered.Spec, fields: ins}
	for _, f := range in.Fields {
		rs.in = append(rs.in, f.Slot)
	}
	for _, f := range outs {
		sf := SchemaField{Name: f.Name, Type: f.Type, Slot: v.p.Width}
		v.p.Width++
		step.Out = step.Out.with(sf)
		rs.out = append(rs.out, sf)
	}
	step.Registered = rs
}

// RegisteredStep is a compiled step of a kind registered from Go: it reads
// the slots of the fields before it and writes one new slot per field it
// writes.
type RegisteredStep struct {
	kind   *registeredTransform
	spec   any
	fields []Field // before the step
	in     []int   // their slots
	out    []SchemaField
}

// stepFunc is a RegisteredStep for one goroutine.
type stepFunc struct {
	s    *RegisteredStep
	fn   func([]any) ([]any, bool, error)
	args []any
}

func (s *RegisteredStep) newFunc() *stepFunc {
	return &stepFunc{s: s, fn: s.kind.new(s.spec, s.fields), args: make([]any, len(s.in))}
}

// apply runs the step on r; false: the step dropped the record.
func (f *stepFunc) apply(r Row) (bool, error) {
	for i, slot := range f.s.in {
		f.args[i] = r[slot]
	}
	out, keep, err := f.fn(f.args)
	if err != nil {
		return false, fmt.Errorf("%w: step %s: %w", ErrEval, f.s.kind.kind.name, err)
	}
	if !keep {
		return false, nil
	}
	if len(out) != len(f.s.out) {
		return false, fmt.Errorf("%w: step %s: %d values, want %d", ErrEval, f.s.kind.kind.name, len(out), len(f.s.out))
	}
	for i, v := range out {
		sf := f.s.out[i]
		if _, err := AggValue(sf.Type, v); err != nil {
			return false, fmt.Errorf("step %s: field %s: %w", f.s.kind.kind.name, sf.Name, err)
		}
		r[sf.Slot] = v
	}
	return true, nil
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
	if !checkFieldList(v, path, "source", fields, false) {
		return nil, false
	}
	s.Registered.fields = fields
	return fields, true
}

// checkFieldList checks the fields a registered kind's Check returned (what
// is "source" or "step"): identifiers, each once, each with a type; none
// only if empty is allowed.
func checkFieldList(v *validator, path, what string, fields []Field, empty bool) bool {
	if len(fields) == 0 && !empty {
		v.fail(path, "the %s gives no fields (its Check returned none)", what)
		return false
	}
	ok := true
	for i, f := range fields {
		switch {
		case !identPattern.MatchString(f.Name):
			v.fail(path, "the %s's field %q is not an identifier (letters, digits and _, not starting with a digit)", what, f.Name)
			ok = false
		case slices.ContainsFunc(fields[:i], func(g Field) bool { return g.Name == f.Name }):
			v.fail(path, "the %s gives field %q twice", what, f.Name)
			ok = false
		case f.Type.Kind == agg.KindInvalid:
			v.fail(path, "the %s's field %q has no type", what, f.Name)
			ok = false
		}
	}
	return ok
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
