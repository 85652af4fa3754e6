package pipelines

import (
	"fmt"
	"reflect"
	"testing"
)

// changelogJob has sources %s and a table whose changelog has options %s.
const changelogJob = `
job: {name: j}
source:
%s
sink:
  table: {name: t, primary_key: [k], columns: {v: {agg: sum}}, changelog: {%s}}
`

// A changelog without brokers goes to the cluster of the job's Kafka
// sources, with their TLS and SASL; a datagen-only job, or one on the
// embedded broker, keeps the embedded broker; explicit brokers win.
func TestChangelogClusterDefault(t *testing.T) {
	const kafkaX = `  - kafka: {brokers: ["x1:9092", "x2:9092"], topics: [in], schema: {k: string, v: int64}, sasl: {mechanism: PLAIN, username: u, password: p}, tls: {}}`
	const kafkaXAgain = `  - kafka: {brokers: ["x2:9092", "x1:9092"], topics: [in2], schema: {k: string, v: int64}, sasl: {mechanism: PLAIN, username: u, password: p}, tls: {}}`
	const datagen = `  - datagen: {fields: {k: {one_of: [a]}, v: {sequence: {}}}}`
	const datagenTopic = `  - datagen: {topic: gen, fields: {k: {one_of: [a]}, v: {sequence: {}}}}`
	for _, c := range []struct {
		name, sources, opts string
		cluster             string
		sasl                bool
	}{
		{"kafka source", kafkaX, "topic: out", "x1:9092,x2:9092", true},
		{"two sources on one cluster, and a datagen", kafkaX + "\n" + kafkaXAgain + "\n" + datagen, "", "x1:9092,x2:9092", true},
		{"datagen only", datagen, "", "embedded", false},
		{"datagen into the embedded broker", datagenTopic, "", "embedded", false},
		{"explicit brokers", kafkaX, `brokers: ["y:9092"]`, "y:9092", false},
		{"explicit embedded", kafkaX, `brokers: [embedded]`, "embedded", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := loadOne(t, fmt.Sprintf(changelogJob, c.sources, c.opts))
			got := p.Changelogs()
			want := []ChangelogTarget{{Table: "t", Topic: "j-t-changelog", Cluster: c.cluster}}
			if c.opts == "topic: out" {
				want[0].Topic = "out"
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("changelogs %+v, want %+v", got, want)
			}
			cl := p.Spec.Sinks[0].Table.Changelog
			if (cl.SASL != nil) != c.sasl || (cl.TLS != nil) != c.sasl {
				t.Fatalf("sasl %+v tls %+v, want inherited: %v", cl.SASL, cl.TLS, c.sasl)
			}
			if c.sasl && cl.SASL.Username != "u" {
				t.Fatalf("sasl %+v", cl.SASL)
			}
		})
	}
}
