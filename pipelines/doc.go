// Package pipelines loads YAML job files strictly and compiles their
// expressions; pipelines/build turns a loaded Pipeline into runtime jobs
// with the concrete sources and sinks (this package never imports Kafka,
// pebble or the table engine).
//
// Load parses each document of each file into yaml nodes, applies the
// --set overrides to the node tree, and decodes the tree against Spec, led
// by struct tags (see decode.go): defaults first, then the file's values
// with ${VAR} substitution. It then validates what crosses keys: the fields
// at each step of the pipeline, the expressions (compiled with expr-lang and
// type-checked against those fields), the table columns against the
// aggregate catalog of sink/aggmerge/agg, key_by against primary_key, and,
// across jobs, names and shared tables. The key reference docs/YAML.md is
// generated from the same tags and checked by a test.
//
// Sources, transforms and sinks are components: each kind is one key of
// Source, Transform or Sink, with its own spec type and its own check
// (validate_kafka.go, validate_datagen.go, validate_transforms.go,
// validate_table.go), listed in the registry of registry.go (Components),
// which the decoder and the validator dispatch on; pipelines/build wires
// each registered kind of source and sink by the same name. A Go program
// adds kinds of source and step of its own through a Registry
// (RegisterSource, RegisterTransform, see registered.go): their specs are
// decoded by the same decoder, their Checks report at file:line:col;
// pipelines/build wires such a source from the runtime.Source its
// SourceKind makes, and the Transformer runs such a step.
//
// The pure parts of running a Pipeline are here too, for the sources,
// operators and sinks that the wiring builds: RowBuilder makes Rows from
// JSON or raw Kafka records (and AppendJSON the reverse), Generator makes
// datagen records, Transformer runs the compiled steps, and
// TableColumn.Value turns a row into a column's aggregate input.
//
// Invariants:
//   - Load reports every problem it finds, each as file:line:col: path:
//     message, sorted by position; it returns jobs only when there is none;
//   - a loaded Pipeline is complete and immutable: every default is filled
//     in (computed ones too: group, changelog topic, column from, names),
//     every expression compiled, every column bound to a type its function
//     accepts (and to a function that can retract, when the job reads a
//     changelog);
//   - a Row holds one slot per field ever defined (Pipeline.Width), and,
//     when a source reads a changelog (format upsert-json or
//     debezium-json), the row's runtime.RowKind in Pipeline.KindSlot, which every
//     step carries along and the table columns then retract on; a step
//     never moves a value, so a Program reads fixed slots; a value's Go type
//     matches its field's type (see Row);
//   - Program and Pipeline are safe to share; Evaluator and Transformer are
//     per goroutine. A runtime failure of an expression is an ErrEval error,
//     never a panic, so the source's on_error policy can apply.
package pipelines
