package pipelines

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

var (
	namePattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hostPattern  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)
)

// CheckName checks the name of a job or a table, which names folders of the
// data directory: letters, digits, '.', '_' and '-', starting with a letter
// or digit (so never "..", and never a path).
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%q is not a valid name (letters, digits, '.', '_', '-')", name)
	}
	return nil
}

// validator checks what the decoder cannot see alone (fields flowing through
// the steps, types, cross-key rules), fills the computed defaults and
// builds the Pipeline. Errors go to the decoder, positioned by path.
type validator struct {
	*decoder
	lines []string // the file's lines, to place errors inside block scalars
	spec  *Spec
	p     *Pipeline
	// known is false when the input fields could not be determined: the
	// checks of fields downstream are then skipped rather than repeated.
	known bool
	// broken holds the fields whose map expression failed: naming them
	// later is not reported again.
	broken map[string]bool
	// changelog is the format of the first source reading a changelog, or
	// "": the table columns must then retract.
	changelog Format
}

// at returns the node of path, or of its nearest ancestor that has one.
func (v *validator) at(path string) *yaml.Node {
	for {
		if n, ok := v.values[path]; ok {
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return v.values[""]
		}
		path = path[:i]
	}
}

// keyAt returns the key node of path (for errors about a name), else at.
func (v *validator) keyAt(path string) *yaml.Node {
	if n, ok := v.keys[path]; ok {
		return n
	}
	return v.at(path)
}

// fail records a problem at path, unless path already has one (the first
// error usually explains the next).
func (v *validator) fail(path, format string, args ...any) {
	if v.bad[path] {
		return
	}
	v.errorf(v.at(path), path, format, args...)
}

// given reports whether the file has a value at path.
func (v *validator) given(path string) bool {
	_, ok := v.values[path]
	return ok
}

// elem is the path of element i of a "one" list: path[i], or path itself
// when the file gave one element without a list.
func (v *validator) elem(path string, i int) string {
	if n := v.values[path]; n != nil && n.Kind == yaml.SequenceNode {
		return fmt.Sprintf("%s[%d]", path, i)
	}
	return path
}

func (v *validator) validate() *Pipeline {
	s := v.spec
	v.p = &Pipeline{File: v.file, Spec: s, KindSlot: -1, where: v}
	if err := CheckName(s.Job.Name); s.Job.Name != "" && err != nil {
		v.fail("job.name", "%v", err)
	}
	if s.Job.Parallelism > s.Job.MaxParallelism {
		v.fail("job.parallelism", "parallelism %d exceeds max_parallelism %d", s.Job.Parallelism, s.Job.MaxParallelism)
	}
	if s.HTTP.Address != "" {
		v.hostPort("http.address", s.HTTP.Address)
	}
	for i, h := range s.HTTP.AllowedHosts {
		if !hostPattern.MatchString(h) {
			v.fail(fmt.Sprintf("http.allowed_hosts[%d]", i), "%q is not a host name (no port, no scheme)", h)
		}
	}
	if at := s.Checkpoint.AlignmentTimeout; at > 0 {
		if s.Checkpoint.Mode == "at_least_once" {
			v.fail("checkpoint.alignment_timeout", "alignment_timeout needs mode exactly_once (at_least_once does not align)")
		} else if at >= s.Checkpoint.Timeout {
			v.fail("checkpoint.alignment_timeout", "alignment_timeout %s must be shorter than timeout %s", at, s.Checkpoint.Timeout)
		}
	}
	if s.Restart.InitialBackoff > s.Restart.MaxBackoff {
		v.fail("restart.initial_backoff", "initial_backoff %s exceeds max_backoff %s", s.Restart.InitialBackoff, s.Restart.MaxBackoff)
	}
	v.sources()
	cur := v.p.Input
	for i := range s.Transforms {
		cur = v.transform(fmt.Sprintf("transforms[%d]", i), &s.Transforms[i], cur)
	}
	v.p.Output = cur
	v.fieldList("key_by", s.KeyBy, cur)
	v.sinks()
	v.scale()
	v.versions()
	return v.p
}

// sources derives the input schema: every source must give the same fields.
func (v *validator) sources() {
	s := v.spec
	v.p.Input = &Schema{}
	v.known = len(s.Sources) > 0
	kinds := map[string]int{}
	for _, src := range s.Sources {
		kinds[src.Kind()]++
	}
	var first []Field
	names := map[string]bool{}
	for i := range s.Sources {
		src := &s.Sources[i]
		path := v.elem("source", i)
		kind := src.kind()
		if src.Name == "" && kind != nil {
			src.Name = kind.name
			if kinds[kind.name] > 1 {
				src.Name = fmt.Sprintf("%s-%d", kind.name, i)
			}
		}
		if src.Name != "" {
			v.uniqueName(path+".name", src.Name, names)
		}
		if kind == nil {
			v.known = false
			continue
		}
		fields, ok := kind.check(v, path+"."+kind.name, src)
		if !ok {
			v.known = false
			continue
		}
		if first == nil {
			first = fields
			for j, f := range fields {
				v.p.Input.Fields = append(v.p.Input.Fields, SchemaField{Name: f.Name, Type: f.Type, Slot: j})
			}
			continue
		}
		if d := diffFields(first, fields); d != "" {
			v.fail(path, "the sources of a job must give the same fields: %s", d)
		}
	}
	v.p.Width = len(v.p.Input.Fields)
	for i := range s.Sources {
		if k := s.Sources[i].kind(); k != nil && k.changelog(&s.Sources[i]) != "" {
			v.changelog = k.changelog(&s.Sources[i])
			v.p.KindSlot = v.p.Width
			v.p.Width++
			break
		}
	}
}

func (v *validator) uniqueName(path, name string, seen map[string]bool) {
	if seen[name] {
		v.fail(path, "name %q is used twice", name)
	}
	seen[name] = true
}

func diffFields(want, got []Field) string {
	var d []string
	for _, w := range want {
		i := slices.IndexFunc(got, func(g Field) bool { return g.Name == w.Name })
		switch {
		case i < 0:
			d = append(d, fmt.Sprintf("no field %q", w.Name))
		case got[i].Type != w.Type:
			d = append(d, fmt.Sprintf("field %q is %s, not %s", w.Name, got[i].Type, w.Type))
		}
	}
	for _, g := range got {
		if !slices.ContainsFunc(want, func(w Field) bool { return w.Name == g.Name }) {
			d = append(d, fmt.Sprintf("extra field %q", g.Name))
		}
	}
	return strings.Join(d, ", ")
}

func (v *validator) connection(path string, c *Connection) {
	for i, b := range c.Brokers {
		if b != "embedded" {
			v.hostPort(fmt.Sprintf("%s.brokers[%d]", path, i), b)
		}
	}
	if c.TLS != nil && (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		v.fail(path+".tls", "cert_file and key_file go together")
	}
}

// hostPort checks a network address.
func (v *validator) hostPort(path, addr string) {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		v.fail(path, "%q is not host:port", addr)
	}
}

// ident checks a field name that expressions must be able to refer to.
func (v *validator) ident(path, name string) bool {
	if identPattern.MatchString(name) {
		return true
	}
	v.errorf(v.keyAt(path), path, "field name %q is not an identifier (letters, digits and _, not starting with a digit)", name)
	return false
}

// transform checks and compiles one step against the schema before it and
// returns the schema after it.
func (v *validator) transform(path string, t *Transform, in *Schema) *Schema {
	step := &Step{Out: in}
	if k := t.kind(); k != nil {
		k.check(v, path+"."+k.name, t, in, step)
	}
	v.p.Steps = append(v.p.Steps, step)
	return step.Out
}

// fieldList checks a list of distinct field names that must exist in s.
func (v *validator) fieldList(path string, names []string, s *Schema) bool {
	if names != nil && len(names) == 0 {
		v.fail(path, "needs at least one field")
		return false
	}
	ok := true
	for i, n := range names {
		p := fmt.Sprintf("%s[%d]", path, i)
		if slices.Index(names, n) < i {
			v.fail(p, "field %q is listed twice", n)
			ok = false
		}
		if _, found := v.field(p, n, s, false, ""); !found {
			ok = false
		}
	}
	return ok
}

// field looks up name in s, reporting an unknown field at path (at its key
// when onKey).
func (v *validator) field(path, name string, s *Schema, onKey bool, hint string) (SchemaField, bool) {
	if !v.known {
		return SchemaField{}, false
	}
	f, ok := s.Field(name)
	if !ok && !v.broken[name] {
		n := v.at(path)
		if onKey {
			n = v.keyAt(path)
		}
		v.errorf(n, path, "no field %q here%s (fields: %s)%s", name, suggest(name, s.Names()), strings.Join(s.Names(), ", "), hint)
	}
	return f, ok
}

func (v *validator) sinks() {
	names := map[string]bool{}
	for _, src := range v.spec.Sources {
		names[src.Name] = true
	}
	for i := range v.spec.Sinks {
		s := &v.spec.Sinks[i]
		path := v.elem("sink", i)
		kind := s.kind()
		if kind == nil {
			continue
		}
		if s.Name == "" {
			s.Name = kind.defaultName(s)
		}
		v.uniqueName(path+".name", s.Name, names)
		v.p.Tables = append(v.p.Tables, kind.check(v, path+"."+kind.name, s))
	}
}
