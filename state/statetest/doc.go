// Package statetest is the conformance suite every state.BackendFactory must
// pass: typed keyed state against a plain Go model under random operations,
// flushes, checkpoints and restores; capture while writing; rescaling; and
// corrupt snapshot files. Backend packages call Run from their tests.
package statetest
