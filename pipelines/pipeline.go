package pipelines

import (
	"time"

	"github.com/ebbflow/ebbflow/runtime/watermark"
	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// Pipeline is a validated job: its spec with every default filled in, the
// schema at each point, the compiled expressions and the resolved tables.
// It is immutable once loaded.
type Pipeline struct {
	File string
	Spec *Spec
	// Input is the sources' fields, in slots 0 to len(Input.Fields)-1.
	Input *Schema
	Steps []*Step
	// Output is the fields after the last step: what key_by and the sinks
	// see.
	Output *Schema
	// Width is the number of slots of a Row.
	Width int
	// KindSlot is the slot of a row's runtime.RowKind when a source reads a
	// changelog (format upsert-json or debezium-json), else -1. The table
	// sinks of such a job retract -U and -D rows, so every column's
	// function can retract (checked at load).
	KindSlot int
	Tables   []*Table // one per sink, in order
	// Dedupe, if set, is the job's dedupe step, run after the other steps,
	// behind a shuffle by its key.
	Dedupe *DedupeStep

	// where places errors found after validation (across jobs) in the file.
	where *validator
}

// ChangelogTarget is where the changelog of one of a job's tables goes.
type ChangelogTarget struct {
	Table string `json:"table"`
	Topic string `json:"topic"`
	// Cluster is "embedded" (the runner's in-process broker) or the seed
	// brokers, joined by commas.
	Cluster string `json:"cluster"`
}

// Changelogs lists, in sink order, the tables of the job that publish a
// changelog, with its topic and cluster as resolved at load.
func (p *Pipeline) Changelogs() []ChangelogTarget {
	var out []ChangelogTarget
	for _, t := range p.Tables {
		if c := t.Spec.Changelog; c != nil {
			out = append(out, ChangelogTarget{Table: t.Spec.Name, Topic: c.Topic, Cluster: c.Cluster()})
		}
	}
	return out
}

// Step is one compiled transform.
type Step struct {
	// Filter, when set, drops the records for which it is false.
	Filter *Program
	// Assigns, for a map, write each program's value into its slot.
	Assigns []Assignment
	// Registered, for a step of a kind registered from Go, runs it.
	Registered *RegisteredStep
	// Out is the schema after the step (drop, project and rename change
	// only the schema).
	Out *Schema
}

// Assignment is one field of a map step.
type Assignment struct {
	Field SchemaField
	Prog  *Program
}

// Table is a table sink resolved against the output schema.
type Table struct {
	Spec    *TableSink
	Key     []SchemaField
	Columns []TableColumn
	// Window, if set, adds the key columns window_start and window_end
	// after Key, computed from the field On.
	Window *TableWindow

	path string // in the file, for messages
}

// TableWindow is a table's tumbling (Slide equal to Size) or hopping
// window.
type TableWindow struct {
	// Size and Slide: Slide equal to Size is tumbling, a Slide dividing
	// Size hopping; both 0 for a session window.
	Size, Slide time.Duration
	// Gap, when set, makes session windows with this gap
	// (watermark.Sessions).
	Gap time.Duration
	On  SchemaField
	// Retain, if set, is how long after its end a window's rows are kept.
	Retain *time.Duration
	// Final: emit: final, a window's row is written once, when it closes.
	Final bool
	// Lateness is the allowed lateness: a window closes when the watermark
	// reaches its end - 1ns + Lateness (ClosesAt).
	Lateness time.Duration
	// Late is the policy for a record of a closed window.
	Late LatePolicy
	// DeadLetter, for late: dead_letter, is the Kafka source whose
	// dead_letter_topic (and connection) takes the late records.
	DeadLetter *KafkaSource
}

// Watermarked reports whether the window consults the watermark: a final
// window, or a policy for late records other than update.
func (w *TableWindow) Watermarked() bool { return w.Final || w.Late != LateUpdate || w.Gap > 0 }

// Sessions is the assignment of a session window (Gap set).
func (w *TableWindow) Sessions() watermark.Sessions { return watermark.Sessions{Gap: w.Gap} }

// SessionLate reports whether a record at event time t (ns since the epoch)
// is late for a session window at watermark wm: t + Lateness <= wm. Then it
// could merge into a session that has closed (a session [start, end)
// closes at ClosesAt(end), and a record joins it only before end), so it
// is late wherever it falls; a record that is not late never meets a closed
// session, and a session that closed can no longer grow. Unlike a tumbling
// window's, a session's lateness is measured from the record's own time.
func (w *TableWindow) SessionLate(t, wm int64) bool { return t+int64(w.Lateness) <= wm }

// ClosesAt returns the event time (ns since the epoch) at which the window
// ending at end closes: once the watermark reached it, every record of the
// window not later than the allowed lateness has arrived (a watermark W
// promises that no record at or before W follows), so a final window fires
// and a record of the window that comes now is late.
func (w *TableWindow) ClosesAt(end time.Time) int64 {
	return end.UnixNano() - 1 + int64(w.Lateness)
}

// The key columns a window adds, after the primary key fields.
const (
	WindowStart = "window_start"
	WindowEnd   = "window_end"
)

// Bounds returns the tumbling window of event time t: [start, end) (the
// writer assigns an Expanded window itself).
func (w *TableWindow) Bounds(t time.Time) (start, end time.Time) {
	ns, size := t.UnixNano(), int64(w.Size)
	s := ns - ns%size
	if ns%size < 0 {
		s -= size // floor for times before the epoch
	}
	return time.Unix(0, s).UTC(), time.Unix(0, s+size).UTC()
}

// TableColumn is a value column: its canonical function, the column type
// the function is bound to, and the field it aggregates.
type TableColumn struct {
	Name   string
	Func   string
	Type   agg.Type
	Params map[string]string
	// Input is the aggregated field; nil for a count of records.
	Input *SchemaField
}

// Transformer applies a pipeline's steps to rows. It is not safe for
// concurrent use: make one per goroutine.
type Transformer struct {
	steps []stepEval
}

type stepEval struct {
	filter  *Evaluator
	assigns []assignEval
	fn      *stepFunc // a registered step
}

type assignEval struct {
	slot int
	ev   *Evaluator
}

// NewTransformer returns a transformer of p's steps.
func (p *Pipeline) NewTransformer() *Transformer {
	t := &Transformer{steps: make([]stepEval, 0, len(p.Steps))}
	for _, s := range p.Steps {
		var se stepEval
		if s.Filter != nil {
			se.filter = s.Filter.NewEvaluator()
		}
		for _, a := range s.Assigns {
			se.assigns = append(se.assigns, assignEval{slot: a.Field.Slot, ev: a.Prog.NewEvaluator()})
		}
		if s.Registered != nil {
			se.fn = s.Registered.newFunc()
		}
		if se.filter != nil || len(se.assigns) > 0 || se.fn != nil {
			t.steps = append(t.steps, se)
		}
	}
	return t
}

// Apply runs the steps on r in place (r has Pipeline.Width slots). It
// returns false when a filter dropped the record. An error is an ErrEval
// error, for the source's on_error policy.
func (t *Transformer) Apply(r Row) (bool, error) {
	for i := range t.steps {
		s := &t.steps[i]
		if s.filter != nil {
			keep, err := s.filter.Eval(r)
			if err != nil {
				return false, err
			}
			if keep != true {
				return false, nil
			}
		}
		for j := range s.assigns {
			a := &s.assigns[j]
			v, err := a.ev.Eval(r)
			if err != nil {
				return false, err
			}
			r[a.slot] = v
		}
		if s.fn != nil {
			if keep, err := s.fn.apply(r); err != nil || !keep {
				return false, err
			}
		}
	}
	return true, nil
}
