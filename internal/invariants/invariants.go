// Package invariants switches on expensive self-checks: code guards an
// assertion that costs more than the work it checks with
//
//	if invariants.Enabled { ... }
//
// Enabled is a constant, false unless the build has the invariants tag
// (go test -tags invariants), so a normal build compiles the check away.
// CI runs the packages that have such checks with the tag (.ci/test).
package invariants
