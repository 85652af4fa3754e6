package pipelines

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
	"github.com/shopspring/decimal"
)

// ErrEval classifies an error of an expression at run time (a null operand,
// a division by zero, ...): the source's on_error policy decides what
// happens to the record.
var ErrEval = errors.New("pipelines: expression failed")

// Program is an expression compiled and type-checked against the schema of
// the step it belongs to. It is immutable and can be shared; evaluate it
// through an Evaluator.
type Program struct {
	src  string
	prog *vm.Program
	typ  agg.Type
	refs []SchemaField // the fields the expression reads
	conv func(any) (any, error)
}

// Source returns the expression's text.
func (p *Program) Source() string { return p.src }

// Type returns the type of the expression's value.
func (p *Program) Type() agg.Type { return p.typ }

// exprError is a compile error with its place inside the expression:
// Line is 1-based, Column 0-based, in runes.
type exprError struct {
	Line, Column int
	Msg          string
	Unknown      string // the unknown field named, if that is the error
}

func (e *exprError) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Column+1, e.Msg) }

// Compile compiles and type-checks the expression src against the fields
// of in; the Program's Type says what it computes.
func Compile(src string, in *Schema) (*Program, error) { return compile(src, in, false) }

// CompileFilter is Compile for an expression that must give a bool.
func CompileFilter(src string, in *Schema) (*Program, error) { return compile(src, in, true) }

// compile type-checks src against in. A filter must give a bool.
func compile(src string, in *Schema, filter bool) (*Program, error) {
	env := make(map[string]any, len(in.Fields))
	for _, f := range in.Fields {
		env[f.Name] = zeroOf(f.Type)
	}
	opts := []expr.Option{expr.Env(env)}
	if filter {
		opts = append(opts, expr.AsBool())
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			ee := &exprError{Line: fe.Line, Column: fe.Column, Msg: fe.Message}
			if name, ok := strings.CutPrefix(fe.Message, "unknown name "); ok {
				ee.Unknown = name
				ee.Msg = fmt.Sprintf("unknown field %q%s", name, suggest(name, in.Names()))
			}
			return nil, ee
		}
		return nil, &exprError{Line: 1, Msg: err.Error()}
	}
	p := &Program{src: src, prog: prog}
	root := prog.Node()
	seen := map[string]bool{}
	if env := ast.Find(root, func(n ast.Node) bool {
		id, ok := n.(*ast.IdentifierNode)
		return ok && id.Value == "$env"
	}); env != nil {
		// The environment holds only the fields an expression names.
		line, col := lineCol(src, env.Location().From)
		return nil, &exprError{Line: line, Column: col, Msg: "$env is not supported: name the fields"}
	}
	ast.Find(root, func(n ast.Node) bool {
		if id, ok := n.(*ast.IdentifierNode); ok && !seen[id.Value] {
			if f, ok := in.Field(id.Value); ok {
				seen[id.Value] = true
				p.refs = append(p.refs, f)
			}
		}
		return false
	})
	if id, ok := root.(*ast.IdentifierNode); ok && len(p.refs) == 1 && p.refs[0].Name == id.Value {
		p.typ = p.refs[0].Type // a field copied as is keeps its type (a decimal's scale)
	} else if p.typ, err = typeOf(root.Type()); err != nil {
		return nil, &exprError{Line: 1, Msg: err.Error()}
	}
	p.conv = converter(p.typ)
	return p, nil
}

// lineCol turns a rune offset into src into expr's line (1-based) and
// column (0-based).
func lineCol(src string, offset int) (line, col int) {
	line = 1
	for i, r := range []rune(src) {
		if i == offset {
			break
		}
		if r == '\n' {
			line, col = line+1, 0
		} else {
			col++
		}
	}
	return line, col
}

func zeroOf(t agg.Type) any {
	switch t.Kind {
	case agg.KindString:
		return ""
	case agg.KindInt64:
		return int64(0)
	case agg.KindFloat64:
		return float64(0)
	case agg.KindBool:
		return false
	case agg.KindDecimal:
		return decimal.Decimal{}
	case agg.KindTimestamp:
		return time.Time{}
	case agg.KindBytes:
		return []byte(nil)
	}
	return nil
}

var (
	timeType    = reflect.TypeFor[time.Time]()
	decimalType = reflect.TypeFor[decimal.Decimal]()
	bytesType   = reflect.TypeFor[[]byte]()
)

// typeOf maps the checker's Go type of an expression to a field type.
func typeOf(t reflect.Type) (agg.Type, error) {
	if t != nil {
		switch t {
		case timeType:
			return agg.Timestamp, nil
		case bytesType:
			return agg.Bytes, nil
		case decimalType:
			return agg.Type{}, errors.New("a computed decimal has no known precision; compute in float64 or int64")
		}
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint8, reflect.Uint16, reflect.Uint32:
			return agg.Int64, nil
		case reflect.Float32, reflect.Float64:
			return agg.Float64, nil
		case reflect.String:
			return agg.String, nil
		case reflect.Bool:
			return agg.Bool, nil
		}
	}
	name := "unknown"
	if t != nil {
		name = t.String()
	}
	return agg.Type{}, fmt.Errorf("the expression's type (%s) is not a field type; convert it with int(), float(), string() or a comparison", name)
}

// converter returns the function that brings an expression's value to the
// Go type of t (expr computes int64 * int as int, for example).
func converter(t agg.Type) func(any) (any, error) {
	switch t.Kind {
	case agg.KindInt64:
		return func(v any) (any, error) {
			switch x := v.(type) {
			case int64:
				return x, nil
			case int:
				return int64(x), nil
			case nil:
				return nil, nil
			case int32:
				return int64(x), nil
			case int16:
				return int64(x), nil
			case int8:
				return int64(x), nil
			case uint8:
				return int64(x), nil
			case uint16:
				return int64(x), nil
			case uint32:
				return int64(x), nil
			}
			return nil, fmt.Errorf("%w: value %v (%T) is not an int64", ErrEval, v, v)
		}
	case agg.KindFloat64:
		return func(v any) (any, error) {
			switch x := v.(type) {
			case float64:
				return x, nil
			case float32:
				return float64(x), nil
			case nil:
				return nil, nil
			}
			return nil, fmt.Errorf("%w: value %v (%T) is not a float64", ErrEval, v, v)
		}
	}
	want := reflect.TypeOf(zeroOf(t))
	return func(v any) (any, error) {
		if v == nil || reflect.TypeOf(v) == want {
			return v, nil
		}
		return nil, fmt.Errorf("%w: value %v (%T) is not a %s", ErrEval, v, v, t)
	}
}

// Evaluator runs one Program. It reuses its memory between calls, so it is
// not safe for concurrent use: make one per goroutine.
type Evaluator struct {
	p   *Program
	vm  vm.VM
	env map[string]any
}

// NewEvaluator returns an evaluator of p.
func (p *Program) NewEvaluator() *Evaluator {
	return &Evaluator{p: p, env: make(map[string]any, len(p.refs))}
}

// Eval returns the expression's value on row r, converted to its Type (nil
// for null). A failure is an ErrEval error.
func (e *Evaluator) Eval(r Row) (any, error) {
	for _, f := range e.p.refs {
		e.env[f.Name] = r[f.Slot]
	}
	out, err := e.vm.Run(e.p.prog, e.env)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrEval, e.p.src, firstLine(err.Error()))
	}
	return e.p.conv(out)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
