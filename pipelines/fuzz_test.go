package pipelines

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad checks that any input gives jobs or positioned errors, never a
// panic. Seeds: every test file. Run longer with go test -fuzz FuzzLoad.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "checkpoint.interval=5s")
	}
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		ps, err := Load([]File{{Name: "f.yaml", Data: data}}, Options{LookupEnv: noEnv, Set: []string{set}})
		var errs Errors
		switch {
		case err == nil && len(ps) == 0:
			t.Fatal("no jobs and no error")
		case err != nil && (!errors.As(err, &errs) || len(errs) == 0 || ps != nil):
			t.Fatalf("Load = %v, %v", ps, err)
		}
		for _, p := range ps {
			p.NewTransformer()
		}
	})
}
