package core

import (
	"fmt"
	"runtime"
	"strconv"
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

// The hot path's single-goroutine benchmarks (BenchmarkAllowN, AllowAt,
// Allow, AllowDenied, AllowBytesN) are the root package's: they measure
// the public methods, this package's decision path included.

// BenchmarkAllowParallel: one hot key from every goroutine (0 B/op,
// 0 allocs/op).
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

// benchRates returns the rates of a hot-key benchmark of alg with k rates:
// a minute and, for k = 2, a second. Limits never deny but for the sliding
// log, which runs in steady state (see BenchmarkAllowN): 1000 per minute
// and 100 per second, now advancing 60 ms per call.
func benchRates(alg Algorithm, k int) ([]Rate, time.Duration) {
	rates := []Rate{{MaxLimit, time.Minute}, {MaxLimit, time.Second}}
	step := time.Duration(0)
	if alg == SlidingLog {
		rates = []Rate{{1000, time.Minute}, {100, time.Second}}
		step = time.Minute / 1000
	}
	return rates[:k], step
}

// BenchmarkAllowRates: one hot key with one rate and with two, explicit
// now, through AllowAt and AllowN: the target for two rates is at most
// 1.5 times the time of one, and 0 allocations. Compare the rates=1 and
// rates=2 rows with benchstat -col /rates (-count 8 or more).
func BenchmarkAllowRates(b *testing.B) {
	for _, alg := range allAlgorithms {
		for _, form := range []string{"AllowAt", "AllowN"} {
			for _, k := range []int{1, 2} {
				b.Run(fmt.Sprintf("%v/%s/rates=%d", alg, form, k), func(b *testing.B) {
					rates, step := benchRates(alg, k)
					l, err := New(Config{Algorithm: alg, Rates: rates, JanitorInterval: -1})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { l.Close() })
					now := benchNow
					for range 1000 {
						l.AllowN("192.0.2.1", now, 1)
						now = now.Add(step)
					}
					b.ReportAllocs()
					if form == "AllowAt" {
						for b.Loop() {
							if !l.AllowAt("192.0.2.1", now) {
								b.Fatal("denied")
							}
							now = now.Add(step)
						}
						return
					}
					for b.Loop() {
						if !l.AllowN("192.0.2.1", now, 1).Allowed {
							b.Fatal("denied")
						}
						now = now.Add(step)
					}
				})
			}
		}
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

// ipv4Key writes the i-th IPv4-style key ("10.0.0.0", "10.0.0.1", ...;
// 8 to 12 bytes for i below 2^28) into buf and returns it.
func ipv4Key(buf *[16]byte, i int) []byte {
	k := strconv.AppendUint(buf[:0], uint64(10+i>>24), 10)
	for shift := 16; shift >= 0; shift -= 8 {
		k = strconv.AppendUint(append(k, '.'), uint64(i>>shift&255), 10)
	}
	return k
}

// insertKeys reports the heap bytes per key (B/key) after newLimiter's
// limiter has taken b.N distinct IPv4-style keys, units admitted units
// each (one key per op, so any -benchtime works, also under the race
// detector); the limiter is created after the first heap reading, so its
// fixed cost is included, which matters only for small b.N. The README's
// figures are for one million keys: -benchtime 1000000x.
func insertKeys(b *testing.B, newLimiter func() Limiter, units int) {
	var buf [16]byte
	before := heapAlloc()
	l := newLimiter()
	n := 0
	for b.Loop() {
		l.AllowBytesN(ipv4Key(&buf, n), benchNow, units)
		n++
	}
	after := heapAlloc()
	b.ReportMetric(float64(after-before)/float64(n), "B/key")
	runtime.KeepAlive(l)
	l.Close()
}

// BenchmarkMemoryPerKey reports the heap bytes per key (B/key, see
// insertKeys) with one admitted unit per key (sliding_log_full: 100 units
// per key, a full ring at limit 100), with one rate (100 per minute) and
// with two (and 10 per second), and a plain map of strings under striped
// mutexes as the baseline.
func BenchmarkMemoryPerKey(b *testing.B) {
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
		for _, k := range []int{1, 2} {
			rates := []Rate{{100, time.Minute}, {10, time.Second}}[:k]
			if v.units > rates[k-1].Limit {
				continue // the second rate would deny the units
			}
			b.Run(fmt.Sprintf("%s/rates=%d", v.name, k), func(b *testing.B) {
				insertKeys(b, func() Limiter {
					l, err := New(Config{Algorithm: v.alg, Rates: rates, JanitorInterval: -1})
					if err != nil {
						b.Fatal(err)
					}
					return l
				}, v.units)
			})
		}
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
		var buf [16]byte
		before := heapAlloc()
		stripes := make([]stripe, 32)
		for i := range stripes {
			stripes[i].m = map[string]entry{}
		}
		n := 0
		for b.Loop() {
			s := &stripes[n&31]
			s.mu.Lock()
			s.m[string(ipv4Key(&buf, n))] = entry{1, 1}
			s.mu.Unlock()
			n++
		}
		after := heapAlloc()
		b.ReportMetric(float64(after-before)/float64(n), "B/key")
		runtime.KeepAlive(stripes)
	})
}

// BenchmarkGCWithKeys reports the time of a forced runtime.GC() with one
// million keys held (gc-ns), the mark work the table adds to every GC cycle
// of the embedding server; "none" is the same without keys.
//
// It skips under the race detector, which makes the million inserts take
// minutes and a GC's time meaningless.
func BenchmarkGCWithKeys(b *testing.B) {
	if raceEnabled {
		b.Skip("a million keys under the race detector")
	}
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
