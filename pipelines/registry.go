package pipelines

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ebbflow/ebbflow/runtime"
)

// SourceFactory builds the runtime source of p.Spec.Sources[i]. Its rows have
// p.Width slots, with the input fields set where p.Input says.
type SourceFactory func(p *Pipeline, i int) (runtime.Source[Row], error)

// SinkFactory builds the runtime sink of p.Spec.Sinks[i] (for a table,
// p.Tables[i] holds the resolved columns).
type SinkFactory func(p *Pipeline, i int) (runtime.Sink[Row], error)

// Registry maps the kinds of sources and sinks a job file can name to their
// constructors. The wiring (cmd/runner) fills it, so this package never
// imports Kafka, pebble or the table.
type Registry struct {
	sources map[string]SourceFactory
	sinks   map[string]SinkFactory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{sources: map[string]SourceFactory{}, sinks: map[string]SinkFactory{}}
}

// RegisterSource sets the constructor of a source kind (kafka, datagen).
func (r *Registry) RegisterSource(kind string, f SourceFactory) { r.sources[kind] = f }

// RegisterSink sets the constructor of a sink kind (table).
func (r *Registry) RegisterSink(kind string, f SinkFactory) { r.sinks[kind] = f }

// SourceFactory returns the constructor of a source kind.
func (r *Registry) SourceFactory(kind string) (SourceFactory, bool) {
	f, ok := r.sources[kind]
	return f, ok
}

// SinkFactory returns the constructor of a sink kind.
func (r *Registry) SinkFactory(kind string) (SinkFactory, bool) {
	f, ok := r.sinks[kind]
	return f, ok
}

// Check reports the kinds p uses that have no constructor, so that a runner
// can refuse a job before starting anything.
func (r *Registry) Check(p *Pipeline) error {
	var missing []string
	for _, s := range p.Spec.Sources {
		if _, ok := r.sources[s.Kind()]; !ok && !slices.Contains(missing, "source "+s.Kind()) {
			missing = append(missing, "source "+s.Kind())
		}
	}
	for _, s := range p.Spec.Sinks {
		if _, ok := r.sinks[s.Kind()]; !ok && !slices.Contains(missing, "sink "+s.Kind()) {
			missing = append(missing, "sink "+s.Kind())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("job %q: this runner cannot build %s", p.Spec.Job.Name, strings.Join(missing, ", "))
	}
	return nil
}
