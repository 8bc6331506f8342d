//go:build !unix

package bench

// cpuTime returns 0 where getrusage is not available: the cpu-ns/op metric
// of benchmarks then reads 0.
func cpuTime() int64 { return 0 }
