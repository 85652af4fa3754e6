// Package depcheck holds the test that keeps the import direction of
// docs/ARCHITECTURE.md: nothing imports upward.
package depcheck

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ebbflow/ebbflow/"

// forbidden maps a package pattern (a prefix of the path inside the module)
// to the prefixes it must not depend on, directly or not.
var forbidden = map[string][]string{
	"internal/base":     stdlibOnly,
	"barrier":           stdlibOnly,
	"runtime/watermark": stdlibOnly,
	"state":             {module + "runtime", module + "operators", module + "sink", module + "pipelines"},
	"runtime":           {module + "operators", module + "sink", module + "pipelines", module + "state/pebblestate", "github.com/cockroachdb/pebble", "github.com/twmb/franz-go"},
	"operators":         {module + "sink", module + "pipelines"},
	"pipelines":         {module + "operators", module + "sink/aggmerge/writer", module + "sink/aggmerge/export", "github.com/cockroachdb/pebble", "github.com/twmb/franz-go"},
	"sink/aggmerge/":    {module + "pipelines", module + "cmd"},
}

// stdlibOnly bans every module, this one included: a leaf imports only the
// standard library.
var stdlibOnly = []string{"github.com/", "golang.org/", "gopkg.in/", "go.yaml.in/"}

// everyone are the packages every package may import, whatever its bans:
// the vocabulary leaf and the hash its buckets are drawn from.
var everyone = []string{module + "internal/base", "github.com/cespare/xxhash/v2"}

// archived are modules no package of ours may depend on, the wiring
// included: gopkg.in/yaml.v3 is archived, its maintained fork is
// go.yaml.in/yaml/v3 (same API).
var archived = []string{"gopkg.in/yaml.v3"}

// exempt are packages under a pattern that are the wiring itself.
var exempt = []string{module + "pipelines/build"}

type pkg struct {
	ImportPath string
	Deps       []string
}

func TestImportDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-json", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p.ImportPath, module)
		for _, d := range p.Deps {
			for _, ban := range archived {
				if d == ban || strings.HasPrefix(d, ban+"/") {
					t.Errorf("%s depends on %s (archived)", p.ImportPath, d)
				}
			}
		}
		if isExempt(p.ImportPath) {
			continue
		}
		for pattern, bans := range forbidden {
			if rel != strings.TrimSuffix(pattern, "/") && !strings.HasPrefix(rel, strings.TrimSuffix(pattern, "/")+"/") {
				continue
			}
			checked++
			for _, d := range p.Deps {
				if slices.Contains(everyone, d) {
					continue
				}
				for _, ban := range bans {
					if strings.HasPrefix(d, ban) {
						t.Errorf("%s depends on %s (forbidden by the import direction)", p.ImportPath, d)
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d packages checked: the pattern list no longer matches the tree", checked)
	}
}

func isExempt(path string) bool {
	for _, e := range exempt {
		if path == e || strings.HasPrefix(path, e+"/") {
			return true
		}
	}
	return false
}
