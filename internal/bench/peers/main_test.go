package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompare: the benchmark stops on any wrong result, so its check must
// see a missing key, a wrong value and a key that is not in the input.
func TestCompare(t *testing.T) {
	want := map[string]agg{"u1": {10, 2, 7}, "u2": {5, 1, 5}}
	if err := compare(want, map[string]agg{"u1": {10, 2, 7}, "u2": {5, 1, 5}}); err != nil {
		t.Fatalf("equal results: %v", err)
	}
	for name, got := range map[string]map[string]agg{
		"missing": {"u1": {10, 2, 7}},
		"value":   {"u1": {10, 2, 7}, "u2": {5, 2, 5}},
		"extra":   {"u1": {10, 2, 7}, "u2": {5, 1, 5}, "u3": {1, 1, 1}},
	} {
		if err := compare(want, got); err == nil {
			t.Errorf("%s: no difference reported", name)
		}
	}
}

// TestResultFormats reads the peers' result file and the ebbflow row as the
// benchmark does.
func TestResultFormats(t *testing.T) {
	path := filepath.Join(t.TempDir(), "result.csv")
	if err := os.WriteFile(path, []byte("u1,10,2,7\nu2,5,1,-3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readResultFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := compare(map[string]agg{"u1": {10, 2, 7}, "u2": {5, 1, -3}}, got); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("u1,10,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readResultFile(path); err == nil || !strings.Contains(err.Error(), "sum,count,max") {
		t.Fatalf("short line: %v", err)
	}
	user, a, err := parseRow([]byte(`{"user":"u9","total":12,"n":3,"largest":9}`))
	if err != nil || user != "u9" || a != (agg{12, 3, 9}) {
		t.Fatalf("parseRow = %q %v %v", user, a, err)
	}
}
