package pipelines

import (
	"fmt"
	"time"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

// DedupeStep is the job's dedupe step resolved against the fields before
// it.
type DedupeStep struct {
	Key    []SchemaField
	Within time.Duration
	// On holds the event time: a timestamp, or an int64 of Unix
	// milliseconds.
	On SchemaField
}

// dedupe checks a dedupe step: the last step, its key fields, its event
// time field (or the sources'), and watermarks from every source, which
// expire what it keeps.
func (v *validator) dedupe(path string, t *Transform, in *Schema, _ *Step) {
	d := t.Dedupe
	if last := &v.spec.Transforms[len(v.spec.Transforms)-1]; t != last {
		v.fail(path, "dedupe must be the last step (it runs behind a shuffle by its key, after the others)")
		return
	}
	step := &DedupeStep{Within: d.Within.Std()}
	ok := v.fieldList(path+".key", d.Key, in)
	if ok {
		for i, name := range d.Key {
			f, _ := in.Field(name)
			if f.Type.Kind == agg.KindStringSet {
				v.fail(fmt.Sprintf("%s.key[%d]", path, i), "a %s field cannot be a key", f.Type)
				ok = false
			}
			step.Key = append(step.Key, f)
		}
	}
	on, onPath := d.On, path+".on"
	if on == "" {
		on, onPath = v.sourcesEventTimeField(path)
	}
	if on != "" {
		f, found := in.Field(on)
		switch {
		case !found:
			v.fail(onPath, "no field %q before the step", on)
			ok = false
		case f.Type != agg.Timestamp && f.Type != agg.Int64:
			v.fail(onPath, "field %q has type %s; event time needs a timestamp or an int64 (Unix milliseconds)", on, f.Type)
			ok = false
		}
		step.On = f
	} else {
		ok = false
	}
	if !v.eventTimeEverywhere(path, "dedupe") {
		ok = false
	}
	if ok && v.known {
		v.p.Dedupe = step
	}
}

// sourcesEventTimeField returns the field every source takes its event
// time from, and the path to blame, or fails at path: a dedupe step
// without on needs one.
func (v *validator) sourcesEventTimeField(path string) (string, string) {
	field := ""
	for i := range v.spec.Sources {
		k := v.spec.Sources[i].Kafka
		if k == nil || k.EventTime == nil {
			return "", "" // eventTimeEverywhere reports it
		}
		switch f := k.EventTime.Field; {
		case f == "":
			v.fail(path, "give on: %s takes its event time from the Kafka timestamp, which the records do not hold", v.elem("source", i)+".kafka")
			return "", ""
		case field != "" && f != field:
			v.fail(path, "give on: the sources take their event time from different fields (%s, %s)", field, f)
			return "", ""
		default:
			field = f
		}
	}
	return field, path
}
