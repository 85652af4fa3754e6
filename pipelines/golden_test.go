package pipelines

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the .golden files of the tests")

// directives reads the "# set: path=value" and "# env: NAME=value" lines of
// a test file: the --set flags and the only environment the test sees.
func directives(data []byte) Options {
	env := map[string]string{}
	var opts Options
	for l := range strings.SplitSeq(string(data), "\n") {
		if s, ok := strings.CutPrefix(l, "# set: "); ok {
			opts.Set = append(opts.Set, s)
		}
		if s, ok := strings.CutPrefix(l, "# env: "); ok {
			k, v, _ := strings.Cut(s, "=")
			env[k] = v
		}
	}
	opts.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	return opts
}

// checkGolden compares got with the content of path, or rewrites it.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

var errorLine = regexp.MustCompile(`^(testdata/invalid/[a-z_]+\.yaml|--set):\d+:\d+: `)

// TestInvalidFiles loads every broken file and compares all its errors,
// positions included, with its .golden file.
func TestInvalidFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) < 12 {
		t.Fatalf("want at least 12 broken files, got %d (%v)", len(files), err)
	}
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			fs, err := ReadFiles(name)
			if err != nil {
				t.Fatal(err)
			}
			ps, err := Load(fs, directives(fs[0].Data))
			var errs Errors
			if !errors.As(err, &errs) || ps != nil {
				t.Fatalf("Load = %v, %v; want no jobs and an Errors", ps, err)
			}
			for _, e := range errs {
				if !errorLine.MatchString(e.Error()) || e.Line < 1 || e.Column < 1 {
					t.Errorf("badly placed error %q", e)
				}
			}
			checkGolden(t, strings.TrimSuffix(name, ".yaml")+".golden", err.Error()+"\n")
		})
	}
}
