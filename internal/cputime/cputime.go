// Package cputime reads the CPU time the process has used, for benchmarks
// that report CPU per record next to wall-clock throughput: on a shared
// machine the first stays meaningful when the second is not.
package cputime

import (
	"syscall"
	"time"
)

// Process returns the user plus system CPU time of the process so far, or
// 0 when the system cannot tell.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
