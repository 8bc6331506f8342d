//go:build unix

package bench

import "syscall"

// cpuTime returns the CPU time the process has used, user and system, in
// nanoseconds, for the cpu-ns/op metric of the Harness benchmarks: time spent waiting
// for a core on a loaded machine inflates ns/op but not cpu-ns/op.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
