// Package changelogfmt holds the changelog formats, both directions: what
// the changelog exporter (sink/aggmerge/export) writes and what a Kafka
// source reading a changelog (export.Read, the runner's changelog source)
// decodes. One file per format: upsertjson.go, debeziumjson.go.
//
// Encoding takes an Entry, a change whose key and rows are already JSON
// objects, so the package needs neither the table nor its value types (it
// sits under operators/ and imports nothing above). Decoding gives
// kafka.Change, the format-neutral change that kafka.Normalizer and
// kafka.NormalizeChanges make exact. The formats are found by name with
// Lookup; a round trip (encode an Entry, decode it) gives back the change.
//
// The two formats share one package rather than having one each because
// they share the Entry, the key decoding and the name lookup the exporter,
// the reader and the YAML builder all go through: split, those would need a
// third package of their own.
//
// version.go holds the table version record of a changelog's versions
// topic (Version, VersionRecord, DecodeVersion): part of the same
// contract, written by the exporter and read by whoever follows the
// changelog.
package changelogfmt
