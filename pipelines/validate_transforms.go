package pipelines

import (
	"errors"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// filter keeps the records for which the expression is true.
func (v *validator) filter(path string, t *Transform, in *Schema, step *Step) {
	step.Filter = v.compile(path, string(*t.Filter), in, true)
}

// mapStep adds or replaces fields, each from an expression on the record
// before the step.
func (v *validator) mapStep(path string, t *Transform, in *Schema, step *Step) {
	if len(t.Map) == 0 {
		v.fail(path, "needs at least one field")
	}
	for _, a := range t.Map {
		ap := path + "." + a.Field
		prog := v.compile(ap, string(a.Expr), in, false)
		if !v.ident(ap, a.Field) || prog == nil {
			v.broken[a.Field] = true
			continue
		}
		f := SchemaField{Name: a.Field, Type: prog.Type(), Slot: v.p.Width}
		v.p.Width++
		step.Out = step.Out.with(f)
		step.Assigns = append(step.Assigns, Assignment{Field: f, Prog: prog})
	}
}

// drop removes fields.
func (v *validator) drop(path string, t *Transform, in *Schema, step *Step) {
	if v.fieldList(path, t.Drop, in) {
		step.Out = &Schema{}
		for _, f := range in.Fields {
			if !slices.Contains(t.Drop, f.Name) {
				step.Out.Fields = append(step.Out.Fields, f)
			}
		}
	}
}

// project keeps only the listed fields, in their order.
func (v *validator) project(path string, t *Transform, in *Schema, step *Step) {
	if v.fieldList(path, t.Project, in) {
		step.Out = &Schema{}
		for _, name := range t.Project {
			f, _ := in.Field(name)
			step.Out.Fields = append(step.Out.Fields, f)
		}
	}
}

// rename renames fields, one after the other.
func (v *validator) rename(path string, t *Transform, in *Schema, step *Step) {
	for _, r := range t.Rename {
		rp := path + "." + r.From
		f, ok := v.field(rp, r.From, step.Out, true, "")
		if !ok || !v.ident(rp, r.To) {
			continue
		}
		if _, taken := step.Out.Field(r.To); taken {
			v.fail(rp, "cannot rename %q to %q: that field exists", r.From, r.To)
			continue
		}
		out := &Schema{Fields: slices.Clone(step.Out.Fields)}
		i := slices.IndexFunc(out.Fields, func(g SchemaField) bool { return g.Name == f.Name })
		out.Fields[i].Name = r.To
		step.Out = out
	}
}

// compile compiles an expression, placing its errors inside the file.
func (v *validator) compile(path, src string, in *Schema, filter bool) *Program {
	if !v.known {
		return nil
	}
	prog, err := compile(src, in, filter)
	if err == nil {
		return prog
	}
	var ee *exprError
	if !errors.As(err, &ee) {
		v.fail(path, "%v", err)
		return nil
	}
	if v.broken[ee.Unknown] {
		return nil
	}
	n := v.at(path)
	pos := &yaml.Node{Line: n.Line + ee.Line - 1, Column: n.Column + ee.Column}
	switch n.Style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		pos.Line = n.Line + ee.Line
		pos.Column = v.indent(n.Line+1) + ee.Column + 1 // the block's indentation is its first line's
	case yaml.SingleQuotedStyle, yaml.DoubleQuotedStyle:
		pos.Column++
	}
	if ee.Line > 1 && n.Style != yaml.LiteralStyle && n.Style != yaml.FoldedStyle {
		pos.Column = ee.Column + 1 // a flow scalar over several lines: the column is a guess
	}
	if v.overrides[n] {
		v.overrides[pos] = true
	}
	v.errorf(pos, path, "%s", ee.Msg)
	return nil
}

// indent returns the number of leading spaces of the 1-based line.
func (v *validator) indent(line int) int {
	if line < 1 || line > len(v.lines) {
		return 0
	}
	l := v.lines[line-1]
	return len(l) - len(strings.TrimLeft(l, " "))
}
