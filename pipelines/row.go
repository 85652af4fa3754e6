package pipelines

import (
	"slices"

	"github.com/ebbflow/ebbflow/runtime"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Row is one record inside a pipeline: one value per slot. A source fills the
// slots of the input fields (0 to len(Input.Fields)-1) of a row of
// Pipeline.Width slots; each map assignment writes its own slot, so no step
// moves values and a dropped field is only hidden. A value is nil (null) or,
// by field type: string, int64, float64, bool, decimal.Decimal, time.Time
// (timestamp) or []byte (bytes). A job reading a changelog has one more
// slot, Pipeline.KindSlot, holding the row's runtime.RowKind (nil: RowInsert); no
// expression sees it and every step carries it along.
type Row []any

// Kind returns the kind of r in a pipeline whose kind slot is slot (-1:
// none, every row inserts).
func (r Row) Kind(slot int) runtime.RowKind {
	if slot < 0 {
		return runtime.RowInsert
	}
	k, _ := r[slot].(runtime.RowKind)
	return k
}

// SchemaField is a field visible at some point of the pipeline, and the
// slot that holds its value.
type SchemaField struct {
	Name string
	Type agg.Type
	Slot int
}

// Schema is the ordered fields visible at one point of the pipeline.
type Schema struct {
	Fields []SchemaField
}

// Field returns the field called name.
func (s *Schema) Field(name string) (SchemaField, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return SchemaField{}, false
}

// Names lists the field names in order.
func (s *Schema) Names() []string {
	n := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		n[i] = f.Name
	}
	return n
}

// with returns a copy of s where f replaces the field of the same name, or
// is appended.
func (s *Schema) with(f SchemaField) *Schema {
	out := &Schema{Fields: slices.Clone(s.Fields)}
	for i := range out.Fields {
		if out.Fields[i].Name == f.Name {
			out.Fields[i] = f
			return out
		}
	}
	out.Fields = append(out.Fields, f)
	return out
}
