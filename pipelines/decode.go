package pipelines

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// The decoder walks a yaml.Node tree against the spec's Go types, led by
// struct tags:
//
//	yaml:"key"        the key in the file
//	default:"v"       the value before decoding (parsed like the file's)
//	required:"true"   the key must be present with a value
//	min:"n" max:"n"   bounds of a number, duration or size
//	form:"map"        a slice of structs written as a mapping: the element
//	                  field tagged key:"true" gets the key, and the value
//	                  decodes into the field tagged value:"true" if any,
//	                  else into the element
//	form:"one"        a slice written as one element (a mapping or a
//	                  scalar) or as a list of them
//	doc:"text"        the description in docs/YAML.md
//
// Struct types with a oneOf method need exactly one of those keys. String
// types with an enumValues method accept only those values. Every problem
// is recorded, with its position, and decoding goes on.

type oneOfer interface{ oneOf() []string }

type enumer interface{ enumValues() []string }

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// fieldInfo is the decoded tags of one struct field.
type fieldInfo struct {
	key, def, min, max, form, doc string
	index                         []int
	required, hasDef              bool
}

var fieldCache sync.Map // reflect.Type -> []fieldInfo

// fieldsOf lists the keys of struct type t, the fields of embedded structs
// tagged yaml:",inline" included.
func fieldsOf(t reflect.Type) []fieldInfo {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.([]fieldInfo)
	}
	var fs []fieldInfo
	for i := range t.NumField() {
		sf := t.Field(i)
		key := sf.Tag.Get("yaml")
		if key == ",inline" {
			for _, f := range fieldsOf(sf.Type) {
				f.index = append([]int{i}, f.index...)
				fs = append(fs, f)
			}
			continue
		}
		if key == "" || key == "-" {
			continue
		}
		def, hasDef := sf.Tag.Lookup("default")
		fs = append(fs, fieldInfo{key: key, index: []int{i}, def: def, hasDef: hasDef,
			required: sf.Tag.Get("required") == "true", min: sf.Tag.Get("min"), max: sf.Tag.Get("max"),
			form: sf.Tag.Get("form"), doc: sf.Tag.Get("doc")})
	}
	fieldCache.Store(t, fs)
	return fs
}

// taggedField returns the index of t's field carrying tag:"true", or -1.
func taggedField(t reflect.Type, tag string) int {
	for i := range t.NumField() {
		if t.Field(i).Tag.Get(tag) == "true" {
			return i
		}
	}
	return -1
}

// decoder holds the state of one document's decoding.
type decoder struct {
	file   string
	lookup func(string) (string, bool)
	errs   Errors
	// values and keys map a path (as in messages) to its value and key node.
	values, keys map[string]*yaml.Node
	// bad holds the paths that have an error: the validator adds none there.
	bad map[string]bool
	// overrides are the nodes made from --set flags: their Line is the
	// flag's number and their Column the column in the flag's text.
	overrides map[*yaml.Node]bool
	// registry holds the components registered from Go (nil: none).
	registry *Registry
}

func newDecoder(file string, lookup func(string) (string, bool)) *decoder {
	return &decoder{file: file, lookup: lookup, values: map[string]*yaml.Node{},
		keys: map[string]*yaml.Node{}, bad: map[string]bool{}, overrides: map[*yaml.Node]bool{}}
}

// errorf records a problem at node n.
func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.bad[path] = true
	e := &Error{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
		if d.overrides[n] {
			e.File = "--set"
		}
	}
	d.errs = append(d.errs, e)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// setDefaults gives the fields of struct v their default values, recursing
// into nested structs (not pointers: a pointer field is absent until given).
func setDefaults(v reflect.Value) {
	for _, f := range fieldsOf(v.Type()) {
		fv := v.FieldByIndex(f.index)
		if f.hasDef {
			if err := setScalar(fv, f.def); err != nil {
				panic(fmt.Sprintf("pipelines: default of %s.%s: %v", v.Type(), f.key, err))
			}
		} else if fv.Kind() == reflect.Struct && !fv.Addr().Type().Implements(textUnmarshaler) {
			setDefaults(fv)
		}
	}
}

// value decodes n into v, which f describes (the zero fieldInfo for a list
// element).
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string, f fieldInfo) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.values[path] = n
	if isNull(n) {
		if f.required {
			d.errorf(n, path, "a value is required")
		} else if v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct {
			v.Set(newStruct(v.Type().Elem()))
		}
		return
	}
	switch f.form {
	case "one":
		if n.Kind != yaml.SequenceNode {
			e := newElem(v.Type().Elem())
			d.value(n, e, path, fieldInfo{})
			v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), e))
			return
		}
	case "map":
		d.mapSlice(n, v, path)
		return
	}
	if v.Kind() == reflect.Pointer {
		p := reflect.New(v.Type().Elem())
		if p.Elem().Kind() == reflect.Struct {
			p = newStruct(v.Type().Elem())
		}
		d.value(n, p.Elem(), path, f)
		v.Set(p)
		return
	}
	if v.Addr().Type().Implements(textUnmarshaler) || isScalarKind(v.Kind()) {
		s, ok := d.scalar(n, path, v)
		if !ok {
			return
		}
		if err := setScalar(v, s); err != nil {
			msg := strings.TrimPrefix(err.Error(), "agg: ")
			if strings.HasPrefix(s, "decimal(") && !strings.Contains(s, ")") {
				msg += ` (inside {...} quote it: "decimal(10,2)"; YAML splits a flow mapping at the comma)`
			}
			d.errorf(n, path, "%s", msg)
			return
		}
		d.checkRange(n, v, path, f)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Slice:
		d.list(n, v, path)
	case reflect.Map:
		d.stringMap(n, v, path)
	default:
		panic(fmt.Sprintf("pipelines: cannot decode into %s", v.Type()))
	}
}

func isScalarKind(k reflect.Kind) bool {
	switch k {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
		return true
	}
	return false
}

func newStruct(t reflect.Type) reflect.Value {
	p := reflect.New(t)
	setDefaults(p.Elem())
	return p
}

// newElem returns a settable new element of type t, with its defaults.
func newElem(t reflect.Type) reflect.Value {
	if t.Kind() == reflect.Struct {
		return newStruct(t).Elem()
	}
	return reflect.New(t).Elem()
}

// scalar returns n's text with ${VAR} substituted, or reports why n is not
// a scalar for v.
func (d *decoder) scalar(n *yaml.Node, path string, v reflect.Value) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "expected %s, got %s", expected(v), describe(n))
		return "", false
	}
	s, err := expand(n.Value, d.lookup)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return "", false
	}
	return s, true
}

func expected(v reflect.Value) string {
	if e, ok := v.Addr().Interface().(interface{ expected() string }); ok {
		return e.expected()
	}
	switch v.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	}
	return "a string"
}

// setScalar parses s into v.
func setScalar(v reflect.Value, s string) error {
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(s))
	}
	switch v.Kind() {
	case reflect.String:
		if e, ok := v.Interface().(enumer); ok {
			vals := e.enumValues()
			if !slices.Contains(vals, s) {
				return fmt.Errorf("%q is not one of %s%s", s, strings.Join(vals, ", "), suggest(s, vals))
			}
		}
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil || (s != "true" && s != "false") {
			return fmt.Errorf("expected true or false, got %q", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
		if err != nil {
			return fmt.Errorf("expected an integer, got %q", s)
		}
		v.SetInt(i)
	case reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("expected a number, got %q", s)
		}
		v.SetFloat(x)
	default:
		panic(fmt.Sprintf("pipelines: no scalar form for %s", v.Type()))
	}
	return nil
}

// checkRange applies the min and max tags to a decoded number.
func (d *decoder) checkRange(n *yaml.Node, v reflect.Value, path string, f fieldInfo) {
	for _, b := range []struct {
		tag  string
		sign float64
		word string
	}{{f.min, 1, "at least"}, {f.max, -1, "at most"}} {
		if b.tag == "" {
			continue
		}
		lim := reflect.New(v.Type()).Elem()
		if err := setScalar(lim, b.tag); err != nil {
			panic(fmt.Sprintf("pipelines: bound %q of %s: %v", b.tag, path, err))
		}
		if (number(v)-number(lim))*b.sign < 0 {
			d.errorf(n, path, "must be %s %s, got %s", b.word, b.tag, n.Value)
		}
	}
}

func number(v reflect.Value) float64 {
	if v.Kind() == reflect.Float64 {
		return v.Float()
	}
	return float64(v.Int())
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	n = d.merge(n, path)
	fields := fieldsOf(v.Type())
	known := make([]string, len(fields))
	for i, f := range fields {
		known[i] = f.key
	}
	oneOf, isOneOf := d.oneOf(v)
	src, _ := v.Addr().Interface().(*Source)
	step, _ := v.Addr().Interface().(*Transform)
	switch {
	case src != nil:
		known = append(known, d.registry.sourceNames()...)
	case step != nil:
		known = append(known, d.registry.transformNames()...)
	}
	seen := map[string]bool{}
	var present []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if !d.key(k, path, seen) {
			continue
		}
		idx := slices.Index(known, k.Value)
		if idx < 0 {
			d.errorf(k, path, "unknown key %q%s", k.Value, suggest(k.Value, known))
			continue
		}
		present = append(present, k.Value)
		if idx >= len(fields) { // a kind registered from Go
			p := join(path, k.Value)
			if src != nil {
				rs := d.registry.source(k.Value)
				src.Registered = &Registered{Kind: k.Value, Spec: d.registeredSpec(val, rs.specType, p), src: rs}
			} else {
				rt := d.registry.transform(k.Value)
				step.Registered = &Registered{Kind: k.Value, Spec: d.registeredSpec(val, rt.specType, p), step: rt}
			}
			continue
		}
		f := fields[idx]
		if isOneOf && slices.Contains(oneOf, f.key) {
			f.required = true // the chosen kind needs a value
		}
		d.value(val, v.FieldByIndex(f.index), join(path, k.Value), f)
	}
	for _, f := range fields {
		if f.required && !seen[f.key] {
			d.errorf(n, path, "missing required key %q", f.key)
		}
	}
	if isOneOf {
		var got []string
		for _, k := range present {
			if slices.Contains(oneOf, k) {
				got = append(got, k)
			}
		}
		switch len(got) {
		case 0:
			d.errorf(n, path, "needs one of %s", strings.Join(oneOf, ", "))
		case 1:
		default:
			d.errorf(n, path, "has both %s and %s; give exactly one of %s", got[0], got[1], strings.Join(oneOf, ", "))
		}
	}
}

// oneOf returns the keys of which struct v needs exactly one, the kinds
// registered from Go included, and whether it has such keys.
func (d *decoder) oneOf(v reflect.Value) ([]string, bool) {
	o, ok := v.Addr().Interface().(oneOfer)
	if !ok {
		return nil, false
	}
	keys := o.oneOf()
	switch o.(type) {
	case *Source:
		keys = append(slices.Clip(keys), d.registry.sourceNames()...)
	case *Transform:
		keys = append(slices.Clip(keys), d.registry.transformNames()...)
	}
	return keys, true
}

// registeredSpec decodes the spec of a kind registered from Go, which needs
// a value, into a new spec of type t with its defaults, and returns it (a
// *t).
func (d *decoder) registeredSpec(n *yaml.Node, t reflect.Type, path string) any {
	spec := newStruct(t)
	d.value(n, spec.Elem(), path, fieldInfo{required: true})
	return spec.Interface()
}

// key checks a mapping key: a string, not seen before in this mapping.
func (d *decoder) key(k *yaml.Node, path string, seen map[string]bool) bool {
	if k.Kind != yaml.ScalarNode {
		d.errorf(k, path, "a key must be a string, got %s", describe(k))
		return false
	}
	if seen[k.Value] {
		d.errorf(k, path, "duplicate key %q", k.Value)
		return false
	}
	seen[k.Value] = true
	d.keys[join(path, k.Value)] = k
	return true
}

func (d *decoder) list(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list, got %s", describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, c := range n.Content {
		e := newElem(v.Type().Elem())
		d.value(c, e, fmt.Sprintf("%s[%d]", path, i), fieldInfo{})
		s = reflect.Append(s, e)
	}
	v.Set(s)
}

// mapSlice decodes a mapping into a slice of structs, keeping the file's
// order (column order matters in a table).
func (d *decoder) mapSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	n = d.merge(n, path)
	et := v.Type().Elem()
	kf, vf := taggedField(et, "key"), taggedField(et, "value")
	s := reflect.MakeSlice(v.Type(), 0, len(n.Content)/2)
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if !d.key(k, path, seen) {
			continue
		}
		e := newElem(et)
		e.Field(kf).SetString(k.Value)
		if vf >= 0 {
			d.value(val, e.Field(vf), join(path, k.Value), fieldInfo{required: true})
		} else {
			d.value(val, e, join(path, k.Value), fieldInfo{})
		}
		s = reflect.Append(s, e)
	}
	v.Set(s)
}

func (d *decoder) stringMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	n = d.merge(n, path)
	m := reflect.MakeMap(v.Type())
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if !d.key(k, path, seen) {
			continue
		}
		e := reflect.New(v.Type().Elem()).Elem()
		d.value(val, e, join(path, k.Value), fieldInfo{})
		m.SetMapIndex(reflect.ValueOf(k.Value), e)
	}
	v.Set(m)
}

func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }

// merge returns mapping n with its YAML merge keys (<<: *anchor, or a list
// of anchors) resolved: the merged pairs come first, and a key of n itself
// replaces a merged one, as in YAML 1.1.
func (d *decoder) merge(n *yaml.Node, path string) *yaml.Node {
	var merged, own []*yaml.Node
	found := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Tag != "!!merge" {
			own = append(own, k, val)
			continue
		}
		found = true
		srcs := []*yaml.Node{val}
		if val.Kind == yaml.SequenceNode {
			srcs = val.Content
		}
		for _, s := range srcs {
			if s.Kind == yaml.AliasNode {
				s = s.Alias
			}
			if s.Kind != yaml.MappingNode {
				d.errorf(s, path, "<< merges a mapping, got %s", describe(s))
				continue
			}
			merged = append(merged, d.merge(s, path).Content...)
		}
	}
	if !found {
		return n
	}
	ownKeys := map[string]bool{}
	for i := 0; i < len(own); i += 2 {
		ownKeys[own[i].Value] = true
	}
	out := *n
	out.Content = nil
	for i := 0; i+1 < len(merged); i += 2 {
		if !ownKeys[merged[i].Value] {
			ownKeys[merged[i].Value] = true // the first merge source wins
			out.Content = append(out.Content, merged[i], merged[i+1])
		}
	}
	out.Content = append(out.Content, own...)
	return &out
}
