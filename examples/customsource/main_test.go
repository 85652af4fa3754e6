package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebbflow/ebbflow/pipelines"
)

// TestWordsJob runs job.yaml, whose source is the words component of this
// program and one of whose steps is its suffix step, through pipelines and pipelines/build to its end, and gets the
// table the file describes; run again on the same data directory, the job
// restores its final checkpoint (the source's position at the end) and
// changes nothing.
func TestWordsJob(t *testing.T) {
	want := map[string]string{} // word -> records, total of 2n, max n
	for i, w := range []string{"ebb", "flow"} {
		var records, total, last int64
		for n := int64(i); n < 1000; n += 3 {
			records, total, last = records+1, total+2*n, n
		}
		want[w] = fmt.Sprintf("%q %d %d %d", w+"!", records, total, last)
	}
	dir := t.TempDir()
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rows, err := run(ctx, "job.yaml", dir)
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if wantRows := slices.Sorted(maps.Values(want)); !slices.Equal(slices.Sorted(slices.Values(rows)), wantRows) {
			t.Fatalf("run %d: table %q, want %q", i, rows, wantRows)
		}
	}
}

// TestWordsBadSpec: a file that misuses the words source is refused with
// every problem at its file:line:col, those the decoder finds from the
// spec's tags (an unknown key, a bound) and those the components' own
// Checks report (a repeated word, a step's field that is not a string), and
// a misspelt kind is offered the registered one.
func TestWordsBadSpec(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	err := os.WriteFile(bad, []byte(`job: {name: words}
source:
  words:
    words: [ebb, flow, ebb]
    count: 0
    colour: blue
sink:
  table: {name: t, primary_key: [word], columns: {n: {agg: count}}}
---
job: {name: other}
source: {wrods: {words: [a]}}
sink:
  table: {name: u, primary_key: [word], columns: {n: {agg: count}}}
---
job: {name: third}
source: {words: {words: [a]}}
transforms:
  - suffix: {field: n, suffix: "!"}
  - sufix: {field: word}
sink:
  table: {name: v, primary_key: [word], columns: {n: {agg: count}}}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, err = load(bad)
	var errs pipelines.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("load: %v, want pipelines.Errors", err)
	}
	got := strings.ReplaceAll(err.Error(), bad, "bad.yaml")
	want := strings.Join([]string{
		`bad.yaml:4:24: source.words.words[2]: word "ebb" is listed twice`,
		`bad.yaml:5:12: source.words.count: must be at least 1, got 0`,
		`bad.yaml:6:5: source.words: unknown key "colour"`,
		`bad.yaml:11:9: source: needs one of kafka, datagen, words`,
		`bad.yaml:11:10: source: unknown key "wrods" (did you mean "words"?)`,
		`bad.yaml:18:21: transforms[0].suffix.field: no string field "n" before the step`,
		`bad.yaml:19:5: transforms[1]: needs one of filter, map, drop, project, rename, dedupe, suffix`,
		`bad.yaml:19:5: transforms[1]: unknown key "sufix" (did you mean "suffix"?)`,
	}, "\n")
	if got != want || len(errs) != 8 {
		t.Fatalf("errors:\n%s\nwant:\n%s", got, want)
	}
}
