package shardlimit

import (
	"testing"
	"time"
)

// TestOneKeysFutureInstantDoesNotFreezeOtherKeys: a key evicted at instant
// T decides its next request no earlier than T, but a key that was never
// stored is not that key. One request with a far-future instant (here a
// denied one, of a cost above the limit) on one key, then a sweep at the
// present, must not move the decisions of a new key of the same shard to
// that future: its sixth request in a minute of limit 5 waits a minute at
// most, not 175 years.
func TestOneKeysFutureInstantDoesNotFreezeOtherKeys(t *testing.T) {
	t.Skip("BUG: an eviction raises its shard's floor to the evicted key's latest instant, and every new key of the shard decides no earlier than the floor; one far-future instant (valid up to 2222) on one key locks every later key of its shard out until then (design: the floor is per shard)")
	far := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustNew(t, Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1})
			if !l.AllowN("a", at(0), 1).Allowed {
				t.Fatal("the first request was denied")
			}
			if r := l.AllowN("a", far, 10); r.Allowed || r.RetryAfter != Never {
				t.Fatalf("a cost above the limit: %+v", r)
			}
			if n := l.Sweep(at(120)); n != 1 {
				t.Fatalf("swept %d keys, want the idle one", n)
			}
			for i := range 6 {
				r := l.AllowN("b", at(120+float64(i)), 1)
				if r.Allowed != (i < 5) || r.ResetAfter > time.Minute || r.RetryAfter > time.Minute {
					t.Fatalf("request %d of a new key at 120 s: %+v", i, r)
				}
			}
		})
	}
}
