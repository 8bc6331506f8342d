package outbound

import (
	"strconv"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// BenchmarkHoldFullTable measures a hold of a new key in a table full of
// live holds: the removal of the hold that ends soonest, the heap's top
// (O(log MaxHolds)), and the new hold's insertion, under the table's
// write lock (every lookup of a held key waits for it).
func BenchmarkHoldFullTable(b *testing.B) {
	for _, max := range []int{DefaultMaxHolds, MaxMaxHolds} {
		b.Run("holds="+strconv.Itoa(max), func(b *testing.B) {
			clock := shardlimit.NewManualClock(t0)
			lim, err := shardlimit.New(shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: 10, Window: time.Second, Clock: clock, JanitorInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			p, err := New(Config{Limiter: lim, MaxHolds: max})
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, max+b.N)
			for i := range keys {
				keys[i] = "k" + strconv.Itoa(i)
			}
			for i := range max {
				_ = p.HoldFor(keys[i], time.Hour+time.Duration(i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				_ = p.HoldFor(keys[max+i], 2*time.Hour)
			}
		})
	}
}

// BenchmarkHoldLookup measures the lookup of Take's path in a table of
// 4,096 live holds: a held key (its hold found) and a key not held (the
// map misses), each under the read lock, with b.RunParallel readers.
func BenchmarkHoldLookup(b *testing.B) {
	h := newHoldTable(DefaultMaxHolds)
	const now = int64(1_000)
	for i := range DefaultMaxHolds {
		h.set("k"+strconv.Itoa(i), now+int64(time.Hour)+int64(i), now)
	}
	clock := func() int64 { return now }
	for _, bc := range []struct{ name, key string }{{"held", "k77"}, {"free", "api.example.com"}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if u, _ := h.until(bc.key, clock); (u != 0) != (bc.name == "held") {
						b.Fatal("wrong hold")
					}
				}
			})
		})
	}
}
