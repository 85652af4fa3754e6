// Package damage breaks files the way failing disks and careless operators
// do, for the tests that check that ebbflow reports the damage instead of
// serving it as truth.
package damage

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Newest returns the highest-numbered file with suffix in dir (pebble
// numbers its files in creation order), failing the test if there is none.
func Newest(t testing.TB, dir, suffix string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatalf("no %s file in %s", suffix, dir)
	}
	slices.Sort(names)
	return filepath.Join(dir, names[len(names)-1])
}

// Rewrite replaces the content of path by what change makes of it.
func Rewrite(t testing.TB, path string, change func([]byte) []byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, change(raw), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Scribble inverts every 7th byte of the first half of the file past its
// first 64 bytes: enough to break the checksum of any block there.
func Scribble(t testing.TB, path string) {
	t.Helper()
	Rewrite(t, path, func(raw []byte) []byte {
		for i := 64; i < len(raw)/2; i += 7 {
			raw[i] ^= 0xff
		}
		return raw
	})
}
