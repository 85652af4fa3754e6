package pipelines

// The components of a job are its sources, transforms and sinks. Each kind
// of component is named by one key in the file (source: {kafka: ...}), has
// its own spec type (the field of Source, Transform or Sink with that yaml
// key, documented from its tags in docs/YAML.md) and its own check, in
// validate_<kind>.go. The tables below are the registry: the decoder takes
// the keys a Source, Transform or Sink may hold from them (one of them, or
// an error listing them all), and the validator dispatches on them.
// pipelines/build wires each kind of source and sink from a registry keyed
// by the same names (transforms run in this package's Transformer); a test
// there checks that the two agree. Kinds of source and step that a Go
// program registers (Registry, registered.go) join them for one Load: the
// decoder and the validator find them by Source.Registered and
// Transform.Registered; pipelines/build wires such a source from
// Pipeline.RegisteredSource, and the Transformer runs such a step
// (Step.Registered).

// Role is the place of a component in a job.
type Role string

// The roles of components.
const (
	RoleSource    Role = "source"
	RoleTransform Role = "transform"
	RoleSink      Role = "sink"
)

// Components returns the names of the registered components of a role, in
// the order of the docs.
func Components(r Role) []string {
	switch r {
	case RoleSource:
		return names(sourceKinds)
	case RoleTransform:
		return names(transformKinds)
	case RoleSink:
		return names(sinkKinds)
	}
	return nil
}

// component is what every kind of component has: the key naming it.
type component struct{ name string }

func (c component) key() string { return c.name }

func names[K interface{ key() string }](kinds []K) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.key()
	}
	return out
}

// sourceKind is a kind of source.
type sourceKind struct {
	component
	given func(*Source) bool
	// check validates the source's spec (at path, the kind's key) and
	// returns the fields it gives, and whether they are known.
	check func(v *validator, path string, s *Source) ([]Field, bool)
	// cluster is the Kafka connection the source reads or writes through,
	// or nil: a changelog without brokers goes to the sources' cluster.
	cluster func(*Source) *Connection
	// changelog is the changelog format the source reads, or "".
	changelog func(*Source) Format
}

var sourceKinds = []sourceKind{
	{component: component{"kafka"}, given: func(s *Source) bool { return s.Kafka != nil },
		check:   func(v *validator, path string, s *Source) ([]Field, bool) { return v.kafka(path, s.Kafka) },
		cluster: func(s *Source) *Connection { return &s.Kafka.Connection },
		changelog: func(s *Source) Format {
			if s.Kafka.Format.Changelog() {
				return s.Kafka.Format
			}
			return ""
		}},
	{component: component{"datagen"}, given: func(s *Source) bool { return s.Datagen != nil },
		check: func(v *validator, path string, s *Source) ([]Field, bool) { return v.datagen(path, s.Datagen) },
		cluster: func(s *Source) *Connection {
			if s.Datagen.Topic == "" {
				return nil
			}
			return &s.Datagen.Kafka
		},
		changelog: func(*Source) Format { return "" }},
}

// kind returns the kind of the source, or nil when it has none.
func (s *Source) kind() *sourceKind {
	if s.Registered != nil && s.Registered.src != nil { // as Load decoded it
		return &s.Registered.src.kind
	}
	for i := range sourceKinds {
		if sourceKinds[i].given(s) {
			return &sourceKinds[i]
		}
	}
	return nil
}

// Kind returns the registry name of the source's kind ("" when it has
// none, which Load reports).
func (s *Source) Kind() string {
	if k := s.kind(); k != nil {
		return k.name
	}
	return ""
}

func (*Source) oneOf() []string { return Components(RoleSource) }

// transformKind is a kind of step.
type transformKind struct {
	component
	given func(*Transform) bool
	// check validates and compiles the step (at path, the kind's key)
	// against in, into step, whose Out is in until check changes it.
	check func(v *validator, path string, t *Transform, in *Schema, step *Step)
}

var transformKinds = []transformKind{
	{component{"filter"}, func(t *Transform) bool { return t.Filter != nil }, (*validator).filter},
	{component{"map"}, func(t *Transform) bool { return t.Map != nil }, (*validator).mapStep},
	{component{"drop"}, func(t *Transform) bool { return t.Drop != nil }, (*validator).drop},
	{component{"project"}, func(t *Transform) bool { return t.Project != nil }, (*validator).project},
	{component{"rename"}, func(t *Transform) bool { return t.Rename != nil }, (*validator).rename},
	{component{"dedupe"}, func(t *Transform) bool { return t.Dedupe != nil }, (*validator).dedupe},
}

// kind returns the kind of the step, or nil when it has none.
func (t *Transform) kind() *transformKind {
	if t.Registered != nil && t.Registered.step != nil { // as Load decoded it
		return &t.Registered.step.kind
	}
	for i := range transformKinds {
		if transformKinds[i].given(t) {
			return &transformKinds[i]
		}
	}
	return nil
}

func (*Transform) oneOf() []string { return Components(RoleTransform) }

// sinkKind is a kind of sink.
type sinkKind struct {
	component
	given func(*Sink) bool
	// defaultName is the sink's name when the file gives none.
	defaultName func(*Sink) string
	// check validates the sink's spec (at path, the kind's key) against
	// the job's output and returns its table.
	check func(v *validator, path string, s *Sink) *Table
}

var sinkKinds = []sinkKind{
	{component: component{"table"}, given: func(s *Sink) bool { return s.Table != nil },
		defaultName: func(s *Sink) string { return s.Table.Name },
		check:       func(v *validator, path string, s *Sink) *Table { return v.table(path, s.Table) }},
}

// kind returns the kind of the sink, or nil when it has none.
func (s *Sink) kind() *sinkKind {
	for i := range sinkKinds {
		if sinkKinds[i].given(s) {
			return &sinkKinds[i]
		}
	}
	return nil
}

// Kind returns the registry name of the sink's kind ("" when it has none,
// which Load reports).
func (s *Sink) Kind() string {
	if k := s.kind(); k != nil {
		return k.name
	}
	return ""
}

func (*Sink) oneOf() []string { return Components(RoleSink) }
