package core

import (
	"errors"
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
			if n := l.Sweep(at(120)); n != 0 {
				t.Fatalf("swept %d keys: a key whose time is ahead is not idle at 120 s", n)
			}
			for i := range 6 {
				r := l.AllowN("b", at(120+float64(i)), 1)
				if r.Allowed != (i < 5) || r.ResetAfter > 2*time.Minute || r.RetryAfter > 2*time.Minute {
					t.Fatalf("request %d of a new key at 120 s: %+v", i, r)
				}
			}
		})
	}
}

// TestFullShardFutureInstantDoesNotFreezeOtherKeys: a new key's request
// with a far-future instant in a full shard judges the other keys idle no
// later than the limiter's clock, so it cannot evict them as idle at its
// own instant and move the shard's floor there.
func TestFullShardFutureInstantDoesNotFreezeOtherKeys(t *testing.T) {
	far := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clock := NewManualClock(at(0))
			l := mustNew(t, Config{Algorithm: alg, Limit: 5, Window: time.Minute, Shards: 1, MaxKeys: 1,
				Clock: clock, JanitorInterval: -1})
			if !l.AllowN("a", at(0), 1).Allowed {
				t.Fatal("the first request was denied")
			}
			if r := l.AllowN("b", far, 1); !errors.Is(r.Err, ErrTooManyKeys) {
				t.Fatalf("a new key at a far instant in a full shard of a busy key: %+v", r)
			}
			clock.Set(at(120)) // "a" is idle now
			for i := range 6 {
				r := l.AllowN("c", at(120+float64(i)), 1)
				if r.Allowed != (i < 5) || r.ResetAfter > 2*time.Minute || r.RetryAfter > 2*time.Minute {
					t.Fatalf("request %d of a new key at 120 s: %+v", i, r)
				}
			}
		})
	}
}
