package bench

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// The Harness family measures the way an independent harness measured
// shardlimit against its peers, so that its figures can be reproduced
// here: every limiter behind a one-method interface (Allower) and reading
// its own clock; one million IPv4-style keys generated in random order
// (Million) and inserted in that order before the timer starts; the keys
// cycled by GOMAXPROCS goroutines that start far apart in that order; and
// rounds interleaved across limiters (run.sh runs the family once per
// round, -count 1 each time, instead of -count N in one go, which would
// run each limiter's N runs back to back).
//
// It differs from the families above in three ways: the call goes through
// a one-method interface; goroutine g of n starts at key g*len/n and walks
// on one key at a time (MillionKeysParallel's goroutines interleave:
// g, g+n, g+2n, ...); and only Allow is timed, with no explicit-now twin.

// Allower is the face the independent harness gave every limiter: one
// request for key now, read from the limiter's own clock. Every Keyed is
// one.
type Allower interface {
	Allow(key string) bool
}

// BenchmarkHarnessHotKey: one existing key, one goroutine, Allow through
// an Allower.
func BenchmarkHarnessHotKey(b *testing.B) {
	each(b, Factories(), Allowed, func(b *testing.B, l Keyed) {
		prepare(l, hotKey)
		defer forget(l, hotKey)
		var a Allower = l
		var denied int64
		b.ResetTimer()
		for range b.N {
			if !a.Allow(hotKey) {
				denied++
			}
		}
		b.StopTimer()
		unexpected(b, l, denied, "denied")
	})
}

// BenchmarkHarnessDenied: one key over its limit (one request per hour),
// one goroutine, Allow through an Allower: every timed decision denies.
func BenchmarkHarnessDenied(b *testing.B) {
	each(b, Factories(), Denied, func(b *testing.B, l Keyed) {
		start := time.Now()
		prepare(l, hotKey)
		defer forget(l, hotKey)
		var a Allower = l
		var allowed int64
		b.ResetTimer()
		for range b.N {
			if a.Allow(hotKey) {
				allowed++
			}
		}
		b.StopTimer()
		// A window aligned to Unix time admits once more per boundary the
		// run crossed.
		allowed -= min(allowed, windowsCrossed(start, Denied.Window))
		unexpected(b, l, allowed, "allowed")
	})
}

// BenchmarkHarnessArenaMillionKeysParallel is HarnessMillionKeysParallel
// with the keys of the timed decisions read from one arena laid out in the
// order the requests arrive (as a server reads keys from its request
// buffers), and that order a fixed random permutation of the order the keys
// were inserted in. In HarnessMillionKeysParallel the timed walk repeats
// the insertion order, so a limiter that lays out per-key state in the
// order keys arrive (as shardlimit's sliding log keeps its rings, and most
// peers their per-key objects) reads it sequentially, and the CPU's prefetcher
// hides its cache misses; real traffic does not revisit a million keys in
// first-seen order, and this scenario does not either. The key bytes are
// read sequentially in both, as from a request buffer.
func BenchmarkHarnessArenaMillionKeysParallel(b *testing.B) {
	ks := Million()
	arena := ks.Arranged(shuffledOrder(ks.Len()))
	defer dropHeld()
	harnessMillion(b, ks, arena)
}

// BenchmarkHarnessMillionKeysParallel: the million keys of Million, each
// inserted with one Allow in the order they were generated (random), then
// Allow through an Allower from GOMAXPROCS goroutines, goroutine g of n
// starting at key g*len/n and walking on one key at a time, wrapping
// around. redis_rate is skipped: a million keys cannot be inserted into
// it before the timer in reasonable time.
func BenchmarkHarnessMillionKeysParallel(b *testing.B) {
	ks := Million()
	defer dropHeld()
	harnessMillion(b, ks, ks)
}

// harnessMillion inserts the keys of ks into each limiter in their order,
// then times Allow on the keys of arena (the same keys, in the order the
// requests arrive) from GOMAXPROCS goroutines, goroutine g of n starting
// at key g*len/n and walking on one key at a time, wrapping around.
func harnessMillion(b *testing.B, ks, arena *KeySet) {
	for _, f := range Factories() {
		b.Run(f.Name, func(b *testing.B) {
			if f.Name == "redis_rate" {
				b.Skip("redis_rate: a million keys cannot be inserted before the timer")
			}
			l, _ := holding(b, func() Keyed {
				l := newLimiter(b, f, Allowed)
				populate(l, ks, time.Time{}, false)
				return l
			})
			var a Allower = l
			procs := runtime.GOMAXPROCS(0)
			n := ks.Len()
			var gid, denied atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				i := int(gid.Add(1)-1) % procs * n / procs
				var d int64
				for pb.Next() {
					if !a.Allow(arena.Key(i)) {
						d++
					}
					if i++; i == n {
						i = 0
					}
				}
				denied.Add(d)
			})
			b.StopTimer()
			// CPU time of the whole process (every goroutine, the GC)
			// per decision: a loaded machine's waits for a core inflate
			// ns/op but not this.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			unexpected(b, l, denied.Load(), "denied")
		})
	}
}
