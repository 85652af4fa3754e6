package pipelines

import (
	"reflect"
	"slices"
	"testing"
)

// The registry and the spec types agree: every key of Source, Transform and
// Sink but name is a registered component of its role, and every
// registered component is such a key, so that a kind added to the spec
// without its check (or the reverse) fails here.
func TestComponentsAreTheSpecKinds(t *testing.T) {
	for role, typ := range map[Role]reflect.Type{
		RoleSource: reflect.TypeFor[Source](), RoleTransform: reflect.TypeFor[Transform](), RoleSink: reflect.TypeFor[Sink](),
	} {
		var keys []string
		for _, f := range fieldsOf(typ) {
			if f.key != "name" {
				keys = append(keys, f.key)
			}
		}
		if got := Components(role); !slices.Equal(got, keys) {
			t.Errorf("%s components %v, want the keys of %s: %v", role, got, typ.Name(), keys)
		}
	}
}

// A component is found by its key, and Kind names it; a source or sink
// without one has no kind.
func TestKindOfAComponent(t *testing.T) {
	if k := (&Source{Datagen: &DatagenSource{}}).Kind(); k != "datagen" {
		t.Errorf("datagen source: kind %q", k)
	}
	if k := (&Source{Kafka: &KafkaSource{}}).Kind(); k != "kafka" {
		t.Errorf("kafka source: kind %q", k)
	}
	if k := (&Sink{Table: &TableSink{}}).Kind(); k != "table" {
		t.Errorf("table sink: kind %q", k)
	}
	if k := (&Source{}).Kind() + (&Sink{}).Kind(); k != "" {
		t.Errorf("no kind: %q", k)
	}
	if k := (&Transform{Rename: []Rename{}}).kind(); k == nil || k.name != "rename" {
		t.Errorf("rename step: kind %v", k)
	}
}
