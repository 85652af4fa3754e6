package build

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/ebbflow/ebbflow/pipelines"
)

// Every source and sink that pipelines registers has its wiring here, and
// nothing else is wired: a component added to one registry and not the
// other fails this test rather than a job.
func TestEveryComponentIsWired(t *testing.T) {
	for role, wired := range map[pipelines.Role][]string{
		pipelines.RoleSource: slices.Sorted(maps.Keys(sourceWiring)),
		pipelines.RoleSink:   slices.Sorted(maps.Keys(sinkWiring)),
	} {
		if want := slices.Sorted(slices.Values(pipelines.Components(role))); !slices.Equal(wired, want) {
			t.Errorf("%s wiring %v, want the registered components %v", role, wired, want)
		}
	}
}

// A kind without wiring is an error that names the wired kinds.
func TestUnwiredKind(t *testing.T) {
	_, err := wiringOf(sourceWiring, pipelines.RoleSource, "http")
	if err == nil || !strings.Contains(err.Error(), `no wiring for source kind "http" (wired: datagen, kafka)`) {
		t.Fatalf("unwired kind: %v", err)
	}
	if w, err := wiringOf(sinkWiring, pipelines.RoleSink, "table"); err != nil || w == nil {
		t.Fatalf("table sink: %v", err)
	}
}
