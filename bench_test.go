package shardlimit

import (
	"testing"
	"time"
)

// Benchmarks of the hot path through the public methods. Compare runs with
// benchstat (-count 6 or more); internal/core holds the table's (memory,
// garbage collection, many keys, parallel) and the bench/ module measures
// the same scenarios side by side with other Go limiters.

var allAlgorithms = []Algorithm{FixedWindow, SlidingLog, SlidingCounter, GCRA}

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
