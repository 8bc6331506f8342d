package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
)

// BenchmarkExactShareFallback measures what recording a Redis decision in
// the local fallback costs per decision (beside BenchmarkExactRoundTrip:
// a round trip is tens of microseconds), over 1,000 keys from all
// goroutines: "own" is the former record (AllowN of the granted units),
// "share" shareFallback (a Peek, then one Settle of the own units or the
// share's difference).
func BenchmarkExactShareFallback(b *testing.B) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.GCRA} {
		for _, mode := range []string{"own", "share"} {
			b.Run(alg.String()+"/"+mode, func(b *testing.B) {
				fb, err := shardlimit.New(ratesCfg(alg, 6, rate(shardlimit.MaxLimit/2, time.Hour)))
				if err != nil {
					b.Fatal(err)
				}
				defer fb.Close()
				e := &Exact{fallback: fb}
				keys := make([]string, 1000)
				now := at(time.Second)
				for i := range keys {
					keys[i] = fmt.Sprint("user:", i)
				}
				// The cluster used twice what this process did: a share
				// to charge at every decision.
				r := shardlimit.Result{Allowed: true, Limit: shardlimit.MaxLimit, Remaining: shardlimit.MaxLimit / 2}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						if mode == "own" {
							fb.AllowN(keys[i%len(keys)], now, 1)
						} else {
							e.shareFallback(keys[i%len(keys)], now, 1, r)
						}
						i++
					}
				})
			})
		}
	}
}
