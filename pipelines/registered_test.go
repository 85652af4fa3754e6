package pipelines_test

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/state"
)

// tickSpec is the spec of a test source: fields f1, f2 (int64 and string),
// in the order Order gives.
type tickSpec struct {
	Order []string `yaml:"order" doc:"the order of the fields"`
	Limit struct {
		Max int64 `yaml:"max" default:"10" min:"1"`
	} `yaml:"limit"`
}

var tick = pipelines.SourceKind[tickSpec]{
	Check: func(c *pipelines.Check, s *tickSpec) []pipelines.Field {
		if s.Limit.Max > 100 {
			c.Fail("limit.max", "at most 100")
		}
		if c.Given("order") && len(s.Order) == 0 {
			c.Fail("order", "empty")
		}
		var out []pipelines.Field
		for _, n := range s.Order {
			t := agg.Int64
			if n == "f2" {
				t = agg.String
			}
			out = append(out, pipelines.Field{Name: n, Type: t})
		}
		if s.Order == nil {
			out = []pipelines.Field{{Name: "f1", Type: agg.Int64}, {Name: "f2", Type: agg.String}}
		}
		return out
	},
	New: func(*tickSpec) func() runtime.Source[[]any] {
		return func() runtime.Source[[]any] { return noRecords{} }
	},
}

type noRecords struct{}

func (noRecords) Open(*runtime.Context) error               { return nil }
func (noRecords) Read(b [][]any) ([][]any, error)           { return b, io.EOF }
func (noRecords) NotifyComplete(barrier.CheckpointID) error { return nil }
func (noRecords) Close() error                              { return nil }
func (noRecords) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	return state.OperatorState{}, nil
}

func registry(t *testing.T) *pipelines.Registry {
	t.Helper()
	r := &pipelines.Registry{}
	if err := pipelines.RegisterSource(r, "tick", tick); err != nil {
		t.Fatal(err)
	}
	return r
}

func loadWith(r *pipelines.Registry, yaml string) ([]*pipelines.Pipeline, error) {
	return pipelines.Load([]pipelines.File{{Name: "job.yaml", Data: []byte(yaml)}}, pipelines.Options{Registry: r})
}

const tickSink = "sink: {table: {name: t, primary_key: [f2], columns: {n: {agg: sum, from: f1}}}}\n"

// TestRegisterSourceRefuses: a name that is taken or not a key, a kind
// without Check or New, and a spec type the decoder cannot fill are
// refused at registration, not at a load.
func TestRegisterSourceRefuses(t *testing.T) {
	r := registry(t)
	type withChan struct {
		C chan int `yaml:"c"`
	}
	type badDefault struct {
		N int64 `yaml:"n" default:"many"`
	}
	for name, err := range map[string]error{
		"taken":         pipelines.RegisterSource(r, "tick", tick),
		"built-in":      pipelines.RegisterSource(r, "kafka", tick),
		"the name key":  pipelines.RegisterSource(r, "name", tick),
		"not a key":     pipelines.RegisterSource(r, "a b", tick),
		"no Check":      pipelines.RegisterSource(r, "t2", pipelines.SourceKind[tickSpec]{New: tick.New}),
		"not a struct":  pipelines.RegisterSource(r, "t3", pipelines.SourceKind[int]{Check: func(*pipelines.Check, *int) []pipelines.Field { return nil }, New: func(*int) func() runtime.Source[[]any] { return nil }}),
		"a channel":     pipelines.RegisterSource(r, "t4", pipelines.SourceKind[withChan]{Check: func(*pipelines.Check, *withChan) []pipelines.Field { return nil }, New: func(*withChan) func() runtime.Source[[]any] { return nil }}),
		"a bad default": pipelines.RegisterSource(r, "t5", pipelines.SourceKind[badDefault]{Check: func(*pipelines.Check, *badDefault) []pipelines.Field { return nil }, New: func(*badDefault) func() runtime.Source[[]any] { return nil }}),
	} {
		if !errors.Is(err, pipelines.ErrRegister) {
			t.Errorf("%s: %v, want ErrRegister", name, err)
		}
	}
	if _, err := loadWith(r, "job: {name: j}\nsource: {t2: {}}\n"+tickSink); err == nil || !strings.Contains(err.Error(), `unknown key "t2"`) {
		t.Errorf("a refused kind is known to Load: %v", err)
	}
}

// TestRegisteredSourceErrors: what a registered kind's Check reports, and
// what is wrong with the fields it returns, is placed at file:line:col with
// the spec's path; the decoder applies the spec's tags (defaults, bounds,
// unknown keys) as for a built-in kind.
func TestRegisteredSourceErrors(t *testing.T) {
	r := registry(t)
	for _, c := range []struct{ yaml, want string }{
		{"source:\n  tick:\n    limit: {max: 500}\n", "job.yaml:4:18: source.tick.limit.max: at most 100"},
		{"source:\n  tick:\n    limit: {max: 0}\n", "job.yaml:4:18: source.tick.limit.max: must be at least 1, got 0"},
		{"source:\n  tick: {order: []}\n", "job.yaml:3:17: source.tick.order: empty"},
		{"source:\n  tick: {order: [f1, f1]}\n", `job.yaml:3:9: source.tick: the source gives field "f1" twice`},
		{"source:\n  tick: {order: [f1, 2x]}\n", `job.yaml:3:9: source.tick: the source's field "2x" is not an identifier (letters, digits and _, not starting with a digit)`},
		{"source:\n  tick: {speed: 3}\n", `job.yaml:3:10: source.tick: unknown key "speed"`},
		{"source:\n  tick:\n", "job.yaml:3:8: source.tick: a value is required"},
		{"source:\n  tick: {}\n  datagen: {fields: {f1: {sequence: {}}}}\n", "job.yaml:3:3: source: has both tick and datagen; give exactly one of kafka, datagen, tick"},
	} {
		_, err := loadWith(r, "job: {name: j}\n"+c.yaml+tickSink)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v\nwant %s", c.yaml, err, c.want)
		}
	}
	// --set reaches a registered spec like any other.
	_, err := pipelines.Load([]pipelines.File{{Name: "job.yaml", Data: []byte("job: {name: j}\nsource: {tick: {}}\n" + tickSink)}},
		pipelines.Options{Registry: r, Set: []string{"source.tick.limit.max=500"}})
	if err == nil || !strings.Contains(err.Error(), "--set:1:") || !strings.Contains(err.Error(), "source.tick.limit.max: at most 100") {
		t.Errorf("--set source.tick.limit.max=500: %v", err)
	}
	// Without the registry the key is unknown, as before.
	if _, err := loadWith(nil, "job: {name: j}\nsource: {tick: {}}\n"+tickSink); err == nil || !strings.Contains(err.Error(), `job.yaml:2:10: source: unknown key "tick"`) {
		t.Errorf("no registry: %v", err)
	}
}

// TestRegisteredSourceRows: a registered source's records land in the slots
// of their fields, also when it is a second source whose fields come in
// another order than the first's; a value of the wrong Go type or a record
// of the wrong length is an error, never a wrong row.
func TestRegisteredSourceRows(t *testing.T) {
	r := registry(t)
	ps, err := loadWith(r, "job: {name: j}\nsource:\n  - tick: {}\n  - tick: {order: [f2, f1]}\n"+tickSink)
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	if p.Spec.Sources[0].Kind() != "tick" || p.Spec.Sources[1].Name != "tick-1" {
		t.Fatalf("kinds and names: %q %q", p.Spec.Sources[0].Kind(), p.Spec.Sources[1].Name)
	}
	if _, _, ok := p.RegisteredSource(0); !ok {
		t.Fatal("source 0 is not registered")
	}
	subtasks, row, ok := p.RegisteredSource(1)
	if !ok || subtasks == nil {
		t.Fatal("source 1 is not registered")
	}
	got, err := row([]any{"x", int64(7)})
	if err != nil || len(got) != p.Width || got[0] != int64(7) || got[1] != "x" {
		t.Fatalf("row of (x, 7): %v, %v; want f1=7 in slot 0, f2=x in slot 1", got, err)
	}
	for _, vals := range [][]any{{"x", 7}, {"x"}, {int64(1), "x"}} {
		if _, err := row(vals); err == nil {
			t.Errorf("row(%v): no error", vals)
		}
	}
}

// evenSpec is the spec of a test step: it keeps the records whose field
// Of is even and writes half of it into As.
type evenSpec struct {
	Of string `yaml:"of" required:"true"`
	As string `yaml:"as" default:"half"`
}

var even = pipelines.TransformKind[evenSpec]{
	Check: func(c *pipelines.Check, s *evenSpec, in []pipelines.Field) []pipelines.Field {
		if !slices.ContainsFunc(in, func(f pipelines.Field) bool { return f.Name == s.Of && f.Type == agg.Int64 }) {
			c.Fail("of", "no int64 field %q", s.Of)
		}
		return []pipelines.Field{{Name: s.As, Type: agg.Int64}}
	},
	New: func(s *evenSpec, in []pipelines.Field) func([]any) ([]any, bool, error) {
		i := slices.IndexFunc(in, func(f pipelines.Field) bool { return f.Name == s.Of })
		return func(vals []any) ([]any, bool, error) {
			n, ok := vals[i].(int64)
			switch {
			case !ok:
				return nil, false, errors.New("null")
			case n == 13:
				return []any{"thirteen"}, true, nil // the wrong Go type
			case n == 15:
				return nil, true, nil // the wrong number of values
			}
			return []any{n / 2}, n%2 == 0, nil
		}
	},
}

// TestRegisteredTransform: a step registered from Go is checked against the
// fields before it (its problems at file:line:col), its fields are seen by
// the steps and sinks after it, and at run time it drops records, writes
// its fields and reports a failure, a value of the wrong type or count as an
// ErrEval error for the source's policy.
func TestRegisteredTransform(t *testing.T) {
	r := registry(t)
	if err := pipelines.RegisterTransform(r, "even", even); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"even", "filter", "tick"} {
		if err := pipelines.RegisterTransform(r, name, even); !errors.Is(err, pipelines.ErrRegister) {
			t.Errorf("RegisterTransform(%q): %v, want ErrRegister", name, err)
		}
	}
	_, err := loadWith(r, "job: {name: j}\nsource: {tick: {}}\ntransforms:\n  - even: {of: f2}\n"+tickSink)
	if err == nil || !strings.Contains(err.Error(), `job.yaml:4:16: transforms[0].even.of: no int64 field "f2"`) {
		t.Errorf("even of a string: %v", err)
	}
	ps, err := loadWith(r, "job: {name: j}\nsource: {tick: {}}\ntransforms:\n  - even: {of: f1}\n  - map: {q: 'half * 10'}\n"+
		"sink: {table: {name: t, primary_key: [f2], columns: {n: {agg: sum, from: q}}}}\n")
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	tr := p.NewTransformer()
	half, _ := p.Output.Field("half")
	q, _ := p.Output.Field("q")
	for n, want := range map[int64]any{4: int64(20), 7: nil} {
		row := make(pipelines.Row, p.Width)
		row[0], row[1] = n, "x"
		keep, err := tr.Apply(row)
		if err != nil || keep != (want != nil) || want != nil && (row[half.Slot] != n/2 || row[q.Slot] != want) {
			t.Errorf("f1=%d: keep %v, %v, row %v; want q=%v", n, keep, err, row, want)
		}
	}
	for _, n := range []any{nil, int64(13), int64(15)} {
		row := make(pipelines.Row, p.Width)
		row[0], row[1] = n, "x"
		if _, err := tr.Apply(row); !errors.Is(err, pipelines.ErrEval) {
			t.Errorf("f1=%v: %v, want ErrEval", n, err)
		}
	}
}
