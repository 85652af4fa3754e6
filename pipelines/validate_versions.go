package pipelines

import "time"

// versions checks versions: by event_time needs a source whose event time
// the cuts follow, in one process, and a changelog that publishes them.
func (v *validator) versions() {
	s := v.spec
	vs := &s.Versions
	if vs.By != VersionsByEventTime {
		if v.given("versions.every") {
			v.fail("versions.every", "is used only with by: event_time")
		}
		return
	}
	switch every := vs.Every.Std(); {
	case !v.given("versions.every"):
		v.fail("versions.by", "by: event_time needs every (the distance between two boundaries, e.g. 10s)")
	case every < time.Millisecond || every%time.Millisecond != 0:
		v.fail("versions.every", "every %s: want at least 1ms, in whole milliseconds", every)
	}
	var k *KafkaSource
	if len(s.Sources) == 1 {
		k = s.Sources[0].Kafka
	}
	src := v.elem("source", 0)
	switch {
	case k == nil:
		v.fail("versions.by", "by: event_time cuts the input of one kafka source: the job has %d source(s), not one kafka source", len(s.Sources))
	case k.EventTime == nil:
		v.fail(src+".kafka", "versions by: event_time needs event_time on the source (the boundaries are passed by its watermark)")
	case k.Format.Changelog():
		v.fail(src+".kafka.format", "versions by: event_time reads plain records, not a changelog (format %s): a job reading changelogs cuts at its upstream's versions with align: versions", k.Format)
	case k.Bounded:
		v.fail(src+".kafka.bounded", "versions by: event_time: a bounded source ends event time, not at a boundary")
	}
	if s.Job.Scale != nil {
		v.fail("job.scale", "versions by: event_time decides its cuts in one process: not with scale")
	}
	published := false
	for _, sk := range s.Sinks {
		if sk.Table != nil && sk.Table.Changelog != nil && sk.Table.Changelog.Mode == "committed" {
			published = true
		}
	}
	if !published {
		v.fail("versions.by", "versions are published with a table's changelog: by: event_time needs a table sink with a changelog in mode committed")
	}
}
