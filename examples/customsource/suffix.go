package main

import (
	"slices"

	"github.com/ebbflow/ebbflow/pipelines"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// SuffixSpec is the spec of the suffix step.
type SuffixSpec struct {
	Field  string `yaml:"field" required:"true" doc:"the string field to change"`
	Suffix string `yaml:"suffix" required:"true" doc:"what to append to it"`
}

// Suffix is the suffix step: it appends a suffix to a string field (a null
// stays null).
var Suffix = pipelines.TransformKind[SuffixSpec]{Check: checkSuffix, New: newSuffix}

// checkSuffix refuses a field that is not a string field before the step,
// at its place in the file; the step writes the field again, a string.
func checkSuffix(c *pipelines.Check, s *SuffixSpec, in []pipelines.Field) []pipelines.Field {
	i := slices.IndexFunc(in, func(f pipelines.Field) bool { return f.Name == s.Field })
	if i < 0 || in[i].Type != agg.String {
		c.Fail("field", "no string field %q before the step", s.Field)
		return nil
	}
	return []pipelines.Field{{Name: s.Field, Type: agg.String}}
}

func newSuffix(s *SuffixSpec, in []pipelines.Field) func([]any) ([]any, bool, error) {
	i := slices.IndexFunc(in, func(f pipelines.Field) bool { return f.Name == s.Field })
	out := make([]any, 1)
	return func(vals []any) ([]any, bool, error) {
		out[0] = nil
		if v, ok := vals[i].(string); ok {
			out[0] = v + s.Suffix
		}
		return out, true, nil
	}
}
