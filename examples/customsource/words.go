package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/ebbflow/ebbflow/barrier"
	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
	"github.com/ebbflow/ebbflow/state"
)

// WordsSpec is the spec of the words source, decoded from the file like a
// built-in one: defaults first, unknown keys refused, bounds checked, every
// problem at file:line:col.
type WordsSpec struct {
	Words []string `yaml:"words" required:"true" doc:"the words, in turn"`
	Count int64    `yaml:"count" default:"100" min:"1" doc:"records, then the source ends"`
}

// Words is the words source: record n (from 0 to count-1) is {n, word},
// word being words[n mod len(words)].
var Words = pipelines.SourceKind[WordsSpec]{Check: checkWords, New: newWords}

// checkWords refuses an empty or repeated word, at its place in the file,
// and returns the fields of the source's records.
func checkWords(c *pipelines.Check, s *WordsSpec) []pipelines.Field {
	for i, w := range s.Words {
		path := fmt.Sprintf("words[%d]", i)
		switch {
		case w == "":
			c.Fail(path, "a word is empty")
		case slices.Index(s.Words, w) < i:
			c.Fail(path, "word %q is listed twice", w)
		}
	}
	return []pipelines.Field{{Name: "n", Type: agg.Int64}, {Name: "word", Type: agg.String}}
}

// positionList names the source's position in checkpoints: one item, the
// next record, held by the subtask that reads (subtask 0; a restore at any
// parallelism deals the one item to subtask 0 again).
const positionList = "words-next"

// words is one subtask of the source.
type words struct {
	spec   *WordsSpec
	next   int64
	reader bool
}

func newWords(s *WordsSpec) func() runtime.Source[[]any] {
	return func() runtime.Source[[]any] { return &words{spec: s} }
}

func (w *words) Open(ctx *runtime.Context) error {
	items := ctx.State.Lists[positionList]
	switch len(items) {
	case 0:
		w.reader = ctx.Subtask == 0 // a fresh start
	case 1:
		n, err := strconv.ParseInt(string(items[0]), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: words position %q: %v", runtime.ErrRestore, items[0], err)
		}
		w.next, w.reader = n, true
	default:
		return fmt.Errorf("%w: %d words positions, want one", runtime.ErrRestore, len(items))
	}
	return nil
}

func (w *words) Read(buf [][]any) ([][]any, error) {
	if !w.reader || w.next >= w.spec.Count {
		return buf, io.EOF
	}
	for len(buf) < cap(buf) && w.next < w.spec.Count {
		buf = append(buf, []any{w.next, w.spec.Words[w.next%int64(len(w.spec.Words))]})
		w.next++
	}
	return buf, nil
}

func (w *words) Snapshot(barrier.CheckpointID) (state.OperatorState, error) {
	if !w.reader {
		return state.OperatorState{}, nil
	}
	return state.OperatorState{Lists: map[string][][]byte{positionList: {strconv.AppendInt(nil, w.next, 10)}}}, nil
}

func (w *words) NotifyComplete(barrier.CheckpointID) error { return nil }
func (w *words) Close() error                              { return nil }
