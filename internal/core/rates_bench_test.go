package core

import (
	"fmt"
	"testing"
	"time"
)

// Benchmarks of several rates per key: a hot key with two rates against
// the same key with one (the target: at most 1.5 times the time, 0
// allocations), and the heap bytes per key. Compare the rates=1 and
// rates=2 rows with benchstat -col /rates (-count 8 or more).

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
// now, through AllowAt and AllowN.
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

// BenchmarkMemoryPerKeyRates reports the heap bytes per key (B/key, see
// insertKeys) with one admitted unit each, with one rate (100 per minute)
// and with two (and 10 per second).
func BenchmarkMemoryPerKeyRates(b *testing.B) {
	for _, alg := range allAlgorithms {
		for _, k := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/rates=%d", alg, k), func(b *testing.B) {
				rates := []Rate{{100, time.Minute}, {10, time.Second}}[:k]
				insertKeys(b, func() Limiter {
					l, err := New(Config{Algorithm: alg, Rates: rates, JanitorInterval: -1})
					if err != nil {
						b.Fatal(err)
					}
					return l
				}, 1)
			})
		}
	}
}
