package shardlimit

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks of the hot path and the table's memory. Compare runs with
// benchstat (-count 6 or more); the bench/ module measures the same
// scenarios side by side with other Go limiters.

const millionKeys = 1_000_000

var (
	ipKeysOnce sync.Once
	ipKeys     []string
)

// ipv4Keys returns one million distinct IPv4-address keys of 8 to 11 bytes
// ("1.0.0.0" is 7; the first 10.x.y.z keys are 8 to 11), verified distinct.
func ipv4Keys(tb testing.TB) []string {
	ipKeysOnce.Do(func() {
		ipKeys = make([]string, 0, millionKeys)
		seen := make(map[string]struct{}, millionKeys)
		for i := 0; len(ipKeys) < millionKeys; i++ {
			k := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
			if len(k) < 8 || len(k) > 11 {
				continue
			}
			if _, dup := seen[k]; dup {
				panic("duplicate key " + k)
			}
			seen[k] = struct{}{}
			ipKeys = append(ipKeys, k)
		}
	})
	if len(ipKeys) != millionKeys {
		tb.Fatal("key generation failed")
	}
	return ipKeys
}

func benchLimiter(b *testing.B, alg Algorithm, limit int) Limiter {
	b.Helper()
	l, err := New(Config{Algorithm: alg, Limit: limit, Window: time.Minute, JanitorInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// benchNow is a fixed instant: the hot path is measured without a clock
// read (see BenchmarkAllow for one with it).
var benchNow = time.Unix(1_734_480_000, 0)

// BenchmarkAllowN: one hot key, explicit now, admitted (huge limit). The
// sliding log, whose state grows with its limit, runs in steady state
// instead: limit 1000 per minute with now advancing 60 ms per call, so each
// call expires one timestamp and stores one.
func BenchmarkAllowN(b *testing.B) {
	for _, alg := range allAlgorithms {
		b.Run(alg.String(), func(b *testing.B) {
			limit, step := MaxLimit, time.Duration(0)
			if alg == SlidingLog {
				limit, step = 1000, time.Minute/1000
			}
			l := benchLimiter(b, alg, limit)
			now := benchNow
			for range 1000 {
				l.AllowN("192.0.2.1", now, 1)
				now = now.Add(step)
			}
			b.ReportAllocs()
			for b.Loop() {
				if !l.AllowN("192.0.2.1", now, 1).Allowed {
					b.Fatal("denied")
				}
				if step != 0 {
					now = now.Add(step)
				}
			}
		})
	}
}

// BenchmarkAllowAt: BenchmarkAllowN through AllowAt, which returns a bool
// instead of a Result.
func BenchmarkAllowAt(b *testing.B) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, GCRA} {
		b.Run(alg.String(), func(b *testing.B) {
			l := benchLimiter(b, alg, MaxLimit)
			l.AllowAt("192.0.2.1", benchNow)
			b.ReportAllocs()
			for b.Loop() {
				if !l.AllowAt("192.0.2.1", benchNow) {
					b.Fatal("denied")
				}
			}
		})
	}
}

// BenchmarkAllow: one hot key, with the limiter's own clock read
// (SystemClock: one monotonic clock read per call).
func BenchmarkAllow(b *testing.B) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, GCRA} {
		b.Run(alg.String(), func(b *testing.B) {
			l := benchLimiter(b, alg, MaxLimit)
			b.ReportAllocs()
			for b.Loop() {
				l.Allow("192.0.2.1")
			}
		})
	}
}

// BenchmarkAllowDenied: one hot key over its limit.
func BenchmarkAllowDenied(b *testing.B) {
	for _, alg := range allAlgorithms {
		b.Run(alg.String(), func(b *testing.B) {
			l := benchLimiter(b, alg, 100)
			l.AllowN("192.0.2.1", benchNow, 100)
			b.ReportAllocs()
			for b.Loop() {
				if l.AllowN("192.0.2.1", benchNow, 1).Allowed {
					b.Fatal("allowed")
				}
			}
		})
	}
}

// BenchmarkAllowBytesN: the []byte twin on a hot key.
func BenchmarkAllowBytesN(b *testing.B) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, GCRA} {
		b.Run(alg.String(), func(b *testing.B) {
			l := benchLimiter(b, alg, MaxLimit)
			key := []byte("192.0.2.1")
			b.ReportAllocs()
			for b.Loop() {
				l.AllowBytesN(key, benchNow, 1)
			}
		})
	}
}

// BenchmarkAllowParallel: one hot key from every goroutine (CASES.md B28:
// 0 B/op, 0 allocs/op).
func BenchmarkAllowParallel(b *testing.B) {
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, GCRA} {
		b.Run(alg.String(), func(b *testing.B) {
			l := benchLimiter(b, alg, MaxLimit)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.AllowN("192.0.2.1", benchNow, 1)
				}
			})
		})
	}
}

// BenchmarkAllowDistinctKeysParallel: one million distinct keys, each
// goroutine walking its own stride; the first pass inserts them.
func BenchmarkAllowDistinctKeysParallel(b *testing.B) {
	keys := ipv4Keys(b)
	for _, alg := range allAlgorithms {
		b.Run(alg.String(), func(b *testing.B) {
			l := benchLimiter(b, alg, 1000)
			var next atomic.Uint64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(7919) * 104729
				for pb.Next() {
					l.AllowN(keys[i%millionKeys], benchNow, 1)
					i++
				}
			})
		})
	}
}

// BenchmarkMemoryPerKey reports the heap bytes per key after inserting one
// million 8-11 byte keys with one admitted unit each (sliding_log_full: 100
// units per key, a full ring at limit 100), and a plain map of strings under
// striped mutexes as the baseline.
func BenchmarkMemoryPerKey(b *testing.B) {
	keys := ipv4Keys(b)
	type variant struct {
		name  string
		alg   Algorithm
		units int
	}
	for _, v := range []variant{
		{"fixed_window", FixedWindow, 1}, {"gcra", GCRA, 1},
		{"sliding_counter", SlidingCounter, 1}, {"sliding_log", SlidingLog, 1},
		{"sliding_log_full", SlidingLog, 100},
	} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				before := heapAlloc()
				l := benchLimiter(b, v.alg, 100)
				for _, k := range keys {
					l.AllowN(k, benchNow, v.units)
				}
				after := heapAlloc()
				b.ReportMetric(float64(after-before)/millionKeys, "B/key")
				runtime.KeepAlive(l)
				l.Close()
			}
		})
	}
	b.Run("plain_map_baseline", func(b *testing.B) {
		type entry struct {
			count uint32
			start int64
		}
		type stripe struct {
			mu sync.Mutex
			m  map[string]entry
		}
		for b.Loop() {
			before := heapAlloc()
			stripes := make([]stripe, 32)
			for i := range stripes {
				stripes[i].m = map[string]entry{}
			}
			for i, k := range keys {
				s := &stripes[i&31]
				s.m[string([]byte(k))] = entry{1, 1}
			}
			after := heapAlloc()
			b.ReportMetric(float64(after-before)/millionKeys, "B/key")
			runtime.KeepAlive(stripes)
		}
	})
}

// BenchmarkGCWithKeys reports the time of a forced runtime.GC() with one
// million keys held (gc-ns), the mark work the table adds to every GC cycle
// of the embedding server; "none" is the same without keys.
func BenchmarkGCWithKeys(b *testing.B) {
	keys := ipv4Keys(b)
	for _, name := range []string{"none", "fixed_window", "sliding_log"} {
		b.Run(name, func(b *testing.B) {
			var l Limiter
			if name != "none" {
				alg, _ := ParseAlgorithm(name)
				l = benchLimiter(b, alg, 100)
				for _, k := range keys {
					l.AllowN(k, benchNow, 3)
				}
			}
			runtime.GC()
			var total time.Duration
			for b.Loop() {
				start := time.Now()
				runtime.GC()
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "gc-ns")
			runtime.KeepAlive(l)
		})
	}
}
