package pipelines

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// override is one --set flag: a path of keys and list indexes, and the value
// as a node tree whose positions point into the flag (line = the flag's
// number, column = the column in "path=value").
type override struct {
	n     int // 1-based flag number
	steps []pathStep
	value *yaml.Node
}

type pathStep struct {
	key   string
	index int // -1 for a key
	col   int // where the step starts in the flag
}

func parseOverrides(sets []string) ([]override, Errors) {
	var out []override
	var errs Errors
	for i, s := range sets {
		o, err := parseOverride(i+1, s)
		if err != nil {
			errs = append(errs, &Error{File: "--set", Line: i + 1, Column: 1, Msg: err.Error()})
			continue
		}
		out = append(out, o)
	}
	return out, errs
}

func parseOverride(n int, s string) (override, error) {
	path, val, ok := strings.Cut(s, "=")
	if !ok || path == "" {
		return override{}, fmt.Errorf("%q is not path=value", s)
	}
	o := override{n: n}
	col := 1
	for seg := range strings.SplitSeq(path, ".") {
		key, rest, _ := strings.Cut(seg, "[")
		if key == "" {
			return override{}, fmt.Errorf("path %q has an empty key", path)
		}
		o.steps = append(o.steps, pathStep{key: key, index: -1, col: col})
		c := col + len(key)
		for rest != "" {
			num, tail, ok := strings.Cut(rest, "]")
			i, err := strconv.Atoi(num)
			if !ok || err != nil || i < 0 || (tail != "" && tail[0] != '[') {
				return override{}, fmt.Errorf("path %q has a bad index", path)
			}
			o.steps = append(o.steps, pathStep{index: i, col: c})
			c += len(num) + 2
			rest = strings.TrimPrefix(tail, "[")
		}
		col += len(seg) + 1
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(val), &doc); err != nil || len(doc.Content) == 0 {
		// Not YAML (or empty): the text as a string, e.g. an expression
		// that starts with a quote.
		doc = yaml.Node{Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: val, Line: 1, Column: 1}}}
		if val == "" {
			doc.Content[0].Tag = "!!null"
		}
	}
	o.value = doc.Content[0]
	shift(o.value, n, col) // col is now just past the '='
	return o, nil
}

// shift moves the positions of a value parsed from a flag into the flag.
func shift(n *yaml.Node, line, col int) {
	if n.Line == 1 {
		n.Column += col - 1
	}
	n.Line = line
	for _, c := range n.Content {
		shift(c, line, col)
	}
}

// apply sets the value in the tree of root, creating missing mappings.
// Where the path cannot be followed (an index into a mapping, past a
// list's end) it records an error.
func (o override) apply(d *decoder, root *yaml.Node) {
	cur := root
	for i, st := range o.steps {
		last := i == len(o.steps)-1
		if cur.Kind == yaml.AliasNode {
			cur = cur.Alias
		}
		if st.index >= 0 {
			if cur.Kind != yaml.SequenceNode || st.index >= len(cur.Content) {
				d.errorf(d.mark(&yaml.Node{Line: o.n, Column: st.col}), o.prefix(i), "no list element [%d] to set", st.index)
				return
			}
			if last {
				cur.Content[st.index] = d.markTree(clone(o.value))
				return
			}
			cur = cur.Content[st.index]
			continue
		}
		switch {
		case cur.Kind == yaml.SequenceNode:
			d.errorf(d.mark(&yaml.Node{Line: o.n, Column: st.col}), o.prefix(i), "is a list: write %s[i].%s", o.prefix(i), st.key)
			return
		case cur.Kind != yaml.MappingNode:
			// A null or a scalar where the path goes on: make it a mapping.
			*cur = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: cur.Line, Column: cur.Column}
		}
		var next *yaml.Node
		for j := 0; j+1 < len(cur.Content); j += 2 {
			if cur.Content[j].Value == st.key {
				next = cur.Content[j+1]
				if last {
					cur.Content[j+1] = d.markTree(clone(o.value))
				}
				break
			}
		}
		if next == nil {
			key := d.mark(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: st.key, Line: o.n, Column: st.col})
			next = d.mark(&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: o.n, Column: st.col})
			if last {
				next = d.markTree(clone(o.value))
			}
			cur.Content = append(cur.Content, key, next)
		}
		cur = next
	}
}

// clone copies a value tree, so that each job gets its own (a later --set
// may add to it).
func clone(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = clone(k)
	}
	return &c
}

// mark records n as coming from a --set flag.
func (d *decoder) mark(n *yaml.Node) *yaml.Node {
	d.overrides[n] = true
	return n
}

func (d *decoder) markTree(n *yaml.Node) *yaml.Node {
	d.mark(n)
	for _, c := range n.Content {
		d.markTree(c)
	}
	return n
}

// prefix renders the first i steps of the path.
func (o override) prefix(i int) string {
	var b strings.Builder
	for _, st := range o.steps[:i] {
		if st.index >= 0 {
			fmt.Fprintf(&b, "[%d]", st.index)
		} else {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(st.key)
		}
	}
	return b.String()
}
