//go:build !invariants

package invariants

// Enabled is false: build with -tags invariants to run the checks.
const Enabled = false
