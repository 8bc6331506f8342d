package core

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkManyLimiters builds 10,000 limiters with a janitor, as a rules
// file of 10,000 rules does, each with one key, and reports the goroutines
// and the memory (heap and goroutine stacks) they hold, and the CPU the
// janitor spends on them while idle (idle-cpu/s: CPU seconds per second).
func BenchmarkManyLimiters(b *testing.B) {
	const n = 10_000
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		b.StartTimer()
		ls := make([]Limiter, n)
		for i := range ls {
			l, err := New(Config{Algorithm: FixedWindow, Limit: 10, Window: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			l.Allow(fmt.Sprint("k", i))
			ls[i] = l
		}
		b.StopTimer()
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		g1 := runtime.NumGoroutine()
		b.ReportMetric(float64(g1-g0), "goroutines")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heapB/limiter")
		b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stackB/limiter")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc+after.StackInuse-before.StackInuse)/(1<<20), "MiB")
		// The janitor's upkeep: CPU time spent while the limiters sit idle
		// for 3 s, 3 sweeps of each at the default interval of 1 s.
		cpu0, wall0 := cpuTime(), time.Now()
		time.Sleep(3 * time.Second)
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Since(wall0)), "idle-cpu/s")
		for _, l := range ls {
			l.Close()
		}
		b.StartTimer()
	}
}
