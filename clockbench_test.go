package shardlimit

import (
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAllowClock compares the time sources of Allow(key): the system
// clock read per decision (SystemClock) and the coarse clock's atomic load
// (CoarseClock), on one hot key and on one million keys in parallel (not
// under the race detector).
func BenchmarkAllowClock(b *testing.B) {
	coarse, err := CoarseClock(0)
	if err != nil {
		b.Fatal(err)
	}
	clocks := []struct {
		name  string
		clock Clock
	}{{"system", SystemClock()}, {"coarse", coarse}}
	for _, c := range clocks {
		for _, alg := range []Algorithm{FixedWindow, GCRA} {
			b.Run("hot/"+c.name+"/"+alg.String(), func(b *testing.B) {
				l, err := New(Config{Algorithm: alg, Limit: MaxLimit, Window: time.Minute, JanitorInterval: -1, Clock: c.clock})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				b.ReportAllocs()
				for b.Loop() {
					l.Allow("192.0.2.1")
				}
			})
		}
	}
	if raceEnabled {
		return // a million inserts per run under the race detector take minutes
	}
	keys := ipv4Keys(b)
	for _, c := range clocks {
		for _, alg := range []Algorithm{FixedWindow, GCRA} {
			b.Run("million/"+c.name+"/"+alg.String(), func(b *testing.B) {
				l, err := New(Config{Algorithm: alg, Limit: 1000, Window: time.Minute, JanitorInterval: -1, Clock: c.clock})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				for _, k := range keys {
					l.Allow(k)
				}
				var next atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := next.Add(7919) * 104729
					for pb.Next() {
						l.Allow(keys[i%millionKeys])
						i++
					}
				})
			})
		}
	}
}
