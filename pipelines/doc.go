// Package pipelines loads YAML job files strictly (every error reported as
// file:line:col), compiles their expressions, and builds runtime jobs from
// them through a registry of sources and sinks filled by the wiring.
package pipelines
