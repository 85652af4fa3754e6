package pipelines

import (
	"fmt"
	"regexp"

	"github.com/ebbflow/ebbflow/sink/aggmerge/agg"
)

func (v *validator) kafka(path string, k *KafkaSource) ([]Field, bool) {
	v.connection(path, &k.Connection)
	switch {
	case k.TopicPattern != "" && k.Topics != nil:
		v.fail(path+".topic_pattern", "give topics or topic_pattern, not both")
	case k.TopicPattern != "":
		if _, err := regexp.Compile(k.TopicPattern); err != nil {
			v.fail(path+".topic_pattern", "%v", err)
		}
	case len(k.Topics) == 0:
		v.fail(path+".topics", "needs at least one topic, or a topic_pattern")
	}
	for i, t := range k.Topics {
		if t == "" {
			v.fail(fmt.Sprintf("%s.topics[%d]", path, i), "a topic name is empty")
		}
	}
	if k.Bounded && v.given(path+".discovery_interval") {
		v.fail(path+".discovery_interval", "a bounded source reads the partitions there are at its first start: no discovery")
	}
	if k.Group == "" {
		k.Group = v.spec.Job.Name
	}
	switch {
	case k.OnError == OnErrorDeadLetter && k.DeadLetterTopic == "":
		v.fail(path+".on_error", "on_error: dead_letter needs dead_letter_topic")
	case k.OnError != OnErrorDeadLetter && k.DeadLetterTopic != "":
		v.fail(path+".dead_letter_topic", "is used only with on_error: dead_letter")
	}
	if k.Align == AlignVersions {
		v.align(path, k)
	}
	ok := v.schemaFields(path+".schema", k.Schema)
	if k.EventTime != nil {
		v.eventTime(path+".event_time", k)
	}
	switch k.Format {
	case FormatJSON, FormatUpsertJSON, FormatDebeziumJSON:
		if len(k.Schema) == 0 {
			if !v.given(path + ".schema") {
				v.fail(path, "format %s needs a schema (field name to type)", k.Format)
			}
			return nil, false
		}
	case FormatRaw:
		if len(k.Schema) == 0 {
			k.Schema = []Field{{Name: "value", Type: agg.String}}
		}
		for _, f := range k.Schema {
			if f.Name != "key" && f.Name != "value" || f.Type != agg.String && f.Type != agg.Bytes {
				v.fail(path+".schema."+f.Name, "format raw gives only key and value, as string or bytes")
				ok = false
			}
		}
	}
	return k.Schema, ok
}

// align checks a source with align: versions: it reads ebbflow changelogs
// by name, from the empty version, whole transactions only, for good.
func (v *validator) align(path string, k *KafkaSource) {
	switch {
	case !k.Format.Changelog():
		v.fail(path+".align", "align: versions is for a changelog (format upsert-json or debezium-json), not format %s", k.Format)
	case k.TopicPattern != "":
		v.fail(path+".align", "align: versions needs topics by name, not a topic_pattern")
	case k.Bounded:
		v.fail(path+".align", "align: versions waits for the upstream's versions: not with bounded: true")
	case k.IsolationLevel != "read_committed":
		v.fail(path+".align", "align: versions reads versions whole: it needs isolation_level read_committed")
	case k.StartOffset != "earliest":
		v.fail(path+".align", "align: versions starts at the empty version: it needs start_offset earliest, not %s", k.StartOffset)
	}
}

// schemaFields checks declared fields: identifiers, of a type a record can
// hold.
func (v *validator) schemaFields(path string, fs []Field) bool {
	ok := true
	for _, f := range fs {
		if !v.ident(path+"."+f.Name, f.Name) {
			ok = false
		}
		if f.Type.Kind == agg.KindStringSet {
			v.fail(path+"."+f.Name, "type %s is for table columns, not record fields", f.Type)
			ok = false
		}
	}
	return ok
}

// eventTime checks a Kafka source's event time: one origin, a field of the
// schema of a type that holds a time (the loader refuses negative
// durations).
func (v *validator) eventTime(path string, k *KafkaSource) {
	et := k.EventTime
	switch {
	case et.Field == "" && !et.KafkaTimestamp:
		v.fail(path, "give field or kafka_timestamp: true")
	case et.Field != "" && et.KafkaTimestamp:
		v.fail(path+".field", "give field or kafka_timestamp: true, not both")
	case et.Field != "":
		switch k.Format {
		case FormatJSON, FormatRaw:
		default:
			v.fail(path+".field", "event time from a field is for formats json and raw, not %s (kafka_timestamp works with every format)", k.Format)
			return
		}
		var f *Field
		for i := range k.Schema {
			if k.Schema[i].Name == et.Field {
				f = &k.Schema[i]
			}
		}
		switch {
		case f == nil:
			v.fail(path+".field", "no field %q in the schema", et.Field)
		case f.Type != agg.Timestamp && f.Type != agg.Int64:
			v.fail(path+".field", "field %q has type %s; event time needs a timestamp or an int64 (Unix milliseconds)", et.Field, f.Type)
		}
	}
}
