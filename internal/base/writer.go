package base

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// WriterID is the identity of a table writer of the exactly-once sink:
// subtask Subtask of sink Sink of job Job. Its string form,
// "<job>/<sink>#<subtask>", is stored in tables (registrations, the writer
// of every log entry) and, as the group "<job>/<sink>", in log holds and the
// sink's checkpoint state: never change it.
type WriterID struct {
	Job     string
	Sink    string
	Subtask int
}

// String returns the stored form "<job>/<sink>#<subtask>".
func (w WriterID) String() string { return w.Group() + "#" + strconv.Itoa(w.Subtask) }

// Group returns "<job>/<sink>": what every subtask of the sink shares, at
// any parallelism (ownership of a bucket moves between subtasks on rescale,
// so entries, markers and log holds are the sink's, not a subtask's).
func (w WriterID) Group() string { return w.Job + "/" + w.Sink }

// ErrWriterID marks a string that is not a writer id.
var ErrWriterID = errors.New("not a writer id <job>/<sink>#<subtask>")

// ParseWriterID parses the form String writes: the subtask follows the last
// '#' (decimal, as String writes it: no sign, no leading zero), the job
// precedes the first '/', the sink is what lies between; none is empty. A
// job name holding '/' cannot be told from a sink name holding it (such a
// job's writers parse with a shorter job and a longer sink), but the
// Group and String of the result are the id's all the same.
func ParseWriterID(s string) (WriterID, error) {
	group, sub, ok := cutLast(s, '#')
	if !ok {
		return WriterID{}, fmt.Errorf("%w: %q has no #<subtask>", ErrWriterID, s)
	}
	n, err := strconv.Atoi(sub)
	if err != nil || n < 0 || sub != strconv.Itoa(n) {
		return WriterID{}, fmt.Errorf("%w: %q: subtask %q is not a number", ErrWriterID, s, sub)
	}
	job, sink, ok := strings.Cut(group, "/")
	if !ok || job == "" || sink == "" {
		return WriterID{}, fmt.Errorf("%w: %q has no <job>/<sink>", ErrWriterID, s)
	}
	return WriterID{Job: job, Sink: sink, Subtask: n}, nil
}

// GroupOf returns the group of a writer id as a table stores it, the part
// before its last '#': the Group of a WriterID's String. ok is false for an
// id without '#' (a writer registered with the table under a name of its
// own), which is its own group.
func GroupOf(id string) (group string, ok bool) {
	group, _, ok = cutLast(id, '#')
	if !ok {
		return id, false
	}
	return group, true
}

func cutLast(s string, sep byte) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}
