package pipelines

import (
	"os/exec"
	"strings"
	"testing"
)

// The package stays above the runtime and below the wiring: it never
// imports Kafka, pebble, the table engine or concrete operators (the
// aggregate vocabulary sink/aggmerge/agg is allowed).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for dep := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		for _, banned := range []string{"twmb/franz-go", "cockroachdb/pebble", "ebbflow/operators", "ebbflow/cmd"} {
			if strings.Contains(dep, banned) {
				t.Errorf("pipelines depends on %s", dep)
			}
		}
		if strings.Contains(dep, "ebbflow/sink/") && !strings.HasSuffix(dep, "sink/aggmerge/agg") {
			t.Errorf("pipelines depends on %s", dep)
		}
	}
}
