package base

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestWriterIDStoredForm: the ids the exactly-once writer has always stored
// ("<job>/<sink>#<subtask>", built by concatenation before WriterID
// existed) parse to their parts, and String gives them back byte for byte,
// so tables, holds and checkpoints written before keep working.
func TestWriterIDStoredForm(t *testing.T) {
	for _, c := range []struct {
		job, sink string
		subtask   int
	}{
		{"sums", "table", 0},
		{"lost", "lost_totals", 1},
		{"quickstart", "revenue", 12},
		{"a.b-c_d", "sink.v2", 31},
		{"job", "table#n2", 3}, // a sink name holding '#'
		{"j", "s", 1 << 20},
	} {
		stored := c.job + "/" + c.sink + "#" + strconv.Itoa(c.subtask) // as writer.sink.Open built it
		id, err := ParseWriterID(stored)
		if err != nil {
			t.Errorf("ParseWriterID(%q): %v", stored, err)
			continue
		}
		if want := (WriterID{Job: c.job, Sink: c.sink, Subtask: c.subtask}); id != want {
			t.Errorf("ParseWriterID(%q) = %+v, want %+v", stored, id, want)
		}
		if id.String() != stored {
			t.Errorf("%+v.String() = %q, want %q", id, id.String(), stored)
		}
		if g, ok := GroupOf(stored); !ok || g != c.job+"/"+c.sink || g != id.Group() {
			t.Errorf("GroupOf(%q) = %q, %v, want %q (the id's Group %q)", stored, g, ok, c.job+"/"+c.sink, id.Group())
		}
	}
}

// TestWriterIDJobWithSlash: a job name with '/' cannot be told from a sink
// name with one; the id parses with the shorter job, and its Group and
// String are the id's all the same (what matching and holds use).
func TestWriterIDJobWithSlash(t *testing.T) {
	w := WriterID{Job: "team/a", Sink: "s", Subtask: 2}
	id, err := ParseWriterID(w.String())
	if err != nil {
		t.Fatal(err)
	}
	if id.Job != "team" || id.Sink != "a/s" || id.Subtask != 2 || id.Group() != w.Group() || id.String() != w.String() {
		t.Fatalf("ParseWriterID(%q) = %+v (group %q), want job team, sink a/s, group %q", w, id, id.Group(), w.Group())
	}
}

// TestParseWriterIDRefuses: what is not a writer id is an error naming the
// input, never a guess.
func TestParseWriterIDRefuses(t *testing.T) {
	for _, s := range []string{
		"", "job", "job/sink", "job/sink#", "job/sink#x", "job/sink#-1", "job/sink#+1", "job/sink#01",
		"job/sink# 1", "job/sink#99999999999999999999", "jobsink#0", "/sink#0", "job/#0", "#0",
	} {
		id, err := ParseWriterID(s)
		if !errors.Is(err, ErrWriterID) {
			t.Errorf("ParseWriterID(%q) = %+v, %v, want ErrWriterID", s, id, err)
			continue
		}
		if want := strconv.Quote(s); !strings.Contains(err.Error(), want) {
			t.Errorf("ParseWriterID(%q): %v does not name the input", s, err)
		}
	}
}

// TestGroupOfOtherIDs: an id without '#' (a writer registered with the
// table under a name of its own) is its own group.
func TestGroupOfOtherIDs(t *testing.T) {
	for id, want := range map[string]string{"loader": "loader", "a/b": "a/b", "x#y": "x", "": ""} {
		g, ok := GroupOf(id)
		if g != want || ok != (id != want) {
			t.Errorf("GroupOf(%q) = %q, %v, want %q", id, g, ok, want)
		}
	}
}
