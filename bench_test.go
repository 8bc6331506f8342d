package shardlimit

import (
	"maps"
	"slices"
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

// boolSink keeps the benchmarks' decisions alive.
var boolSink bool

// BenchmarkAllowAt: why AllowAt is a spelling of its own. On one hot key
// at a fixed now, form=AllowAt against form=AllowN, the spelling it would
// otherwise be: AllowN(key, now, 1).Allowed, which computes and copies the
// whole Result. Compare the two columns with benchstat -col /form.
func BenchmarkAllowAt(b *testing.B) {
	key := "192.0.2.1"
	forms := map[string]func(l Limiter) bool{
		"AllowAt": func(l Limiter) bool { return l.AllowAt(key, benchNow) },
		"AllowN":  func(l Limiter) bool { return l.AllowN(key, benchNow, 1).Allowed },
	}
	benchForms(b, forms)
}

// BenchmarkAllowBytesAt: BenchmarkAllowAt for the []byte twins,
// form=AllowBytesAt against AllowBytesN(key, now, 1).Allowed.
func BenchmarkAllowBytesAt(b *testing.B) {
	key := []byte("192.0.2.1")
	forms := map[string]func(l Limiter) bool{
		"AllowBytesAt": func(l Limiter) bool { return l.AllowBytesAt(key, benchNow) },
		"AllowBytesN":  func(l Limiter) bool { return l.AllowBytesN(key, benchNow, 1).Allowed },
	}
	benchForms(b, forms)
}

// BenchmarkAllowNow: why AllowNow is a spelling of its own. With the
// default clock, form=AllowNow against form=AllowN, the spelling it would
// otherwise be: AllowN(key, clock.Now(), 1), which builds a time.Time from
// the clock and converts it back to the limiter's instant.
func BenchmarkAllowNow(b *testing.B) {
	key, clock := "192.0.2.1", DefaultClock()
	forms := map[string]func(l Limiter) bool{
		"AllowNow": func(l Limiter) bool { return l.AllowNow(key, 1).Allowed },
		"AllowN":   func(l Limiter) bool { return l.AllowN(key, clock.Now(), 1).Allowed },
	}
	benchForms(b, forms)
}

// BenchmarkAllowBytesNow: BenchmarkAllowNow for the []byte twins,
// form=AllowBytesNow against AllowBytesN(key, clock.Now(), 1).
func BenchmarkAllowBytesNow(b *testing.B) {
	key, clock := []byte("192.0.2.1"), DefaultClock()
	forms := map[string]func(l Limiter) bool{
		"AllowBytesNow": func(l Limiter) bool { return l.AllowBytesNow(key, 1).Allowed },
		"AllowBytesN":   func(l Limiter) bool { return l.AllowBytesN(key, clock.Now(), 1).Allowed },
	}
	benchForms(b, forms)
}

// benchForms runs each of forms, spellings of one decision, on one hot
// key of each algorithm but the sliding log (whose state grows with its
// limit), sub-benchmarks named form=<name>/alg=<algorithm>.
func benchForms(b *testing.B, forms map[string]func(l Limiter) bool) {
	b.Helper()
	names := slices.Sorted(maps.Keys(forms))
	for _, alg := range []Algorithm{FixedWindow, SlidingCounter, GCRA} {
		l := benchLimiter(b, alg, MaxLimit)
		l.AllowN("192.0.2.1", benchNow, 1)
		for _, name := range names {
			f := forms[name]
			b.Run("form="+name+"/alg="+alg.String(), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					boolSink = f(l)
				}
			})
		}
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
