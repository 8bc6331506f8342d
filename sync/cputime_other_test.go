//go:build !unix

package sync

// cpuTime returns 0 where getrusage is not available: the CPU of the idle
// cost (see measureIdle) then reads 0.
func cpuTime() int64 { return 0 }
