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
	ok := v.schemaFields(path+".schema", k.Schema)
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
