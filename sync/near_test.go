package sync

import (
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedNearLimitReadEveryFlush: a key near its limit is read at every
// flush of a node, whether or not the node decided it since (issue 11,
// item 6), also once the clock has moved into a bucket the node has not
// decided it in; a key with room to spare is not.
func TestSharedNearLimitReadEveryFlush(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			c := sharedClient(t)
			clock := shardlimit.NewManualClock(at(time.Second))
			cfg := SharedConfig{Config: shardlimit.Config{Algorithm: alg, Limit: 10, Window: time.Minute, Buckets: 6, Clock: clock},
				Prefix: redistest.Prefix(t)}
			a, b := newShared(t, c, cfg), newShared(t, c, cfg)
			now := clock.Now()
			for _, key := range []string{"near", "later"} {
				a.AllowN(key, now, 5)
			}
			a.AllowN("far", now, 1)
			mustFlush(t, a)
			for _, key := range []string{"near", "later"} {
				b.AllowN(key, now, 4)
			}
			b.AllowN("far", now, 1)
			mustFlush(t, b) // b reads a's units: near and later have 1 left
			if r := b.Peek("near", now, 0); r.Remaining != 1 {
				t.Fatalf("b's view of near: %+v, want 1 left", r)
			}

			// a takes near's last unit and one more of far; b flushes
			// without deciding either and learns of the first only.
			a.AllowN("near", now, 1)
			a.AllowN("far", now, 1)
			mustFlush(t, a)
			mustFlush(t, b)
			if st := b.SharedStats(); st.NearKeys != 2 {
				t.Errorf("b's stats %+v: want near and later read for being near their limit", st)
			}
			if r := b.Peek("near", now, 0); r.Remaining != 0 {
				t.Errorf("b's view of near after its flush: %+v, want 0 left", r)
			}
			if r := b.Peek("far", now, 0); r.Remaining != 8 {
				t.Errorf("b's view of far: %+v, want 8 (a's second unit unread: far is not near its limit)", r)
			}
			if alg == shardlimit.FixedWindow {
				return
			}

			// The clock moves 20 s on, two buckets: b has not decided
			// later in the new one. a takes later's last unit there; b
			// reads it at its next flush.
			clock.Advance(20 * time.Second)
			now = clock.Now()
			mustFlush(t, b) // brings later to now, reads its buckets
			if r := a.AllowN("later", now, 1); !r.Allowed {
				t.Fatalf("a denied later's last unit: %+v", r)
			}
			mustFlush(t, a)
			mustFlush(t, b)
			if r := b.Peek("later", now, 0); r.Remaining != 0 {
				t.Errorf("b's view of later in the new bucket: %+v, want 0 left", r)
			}
		})
	}
}

// TestSharedNearAnyRatesLimitIsRead: a key is read at every flush when any of its
// rates is near its own limit, once however many are; a key whose shorter
// rate has little room but no other node's units in it, and whose longer
// rate has room to spare, is not.
func TestSharedNearAnyRatesLimitIsRead(t *testing.T) {
	c := sharedClient(t)
	clock := shardlimit.NewManualClock(at(time.Second))
	cfg := SharedConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Clock: clock,
		Rates: []shardlimit.Rate{{Limit: 1000, Window: time.Minute}, {Limit: 1000, Window: time.Hour}}},
		Prefix: redistest.Prefix(t)}
	pair := func(limits map[string][2]int) (a, b *Shared) {
		cfg.Prefix = redistest.Prefix(t)
		a, b = newShared(t, c, cfg), newShared(t, c, cfg)
		for _, s := range []*Shared{a, b} {
			for key, l := range limits {
				if err := s.SetLimits(key, l[0], l[1]); err != nil {
					t.Fatal(err)
				}
			}
		}
		return a, b
	}
	limits := map[string][2]int{ // per minute, per hour
		"short": {10, 1000}, // near in the minute
		"long":  {1000, 10}, // near in the hour
		"both":  {10, 10},   // near in both
		"far":   {1000, 1000},
	}
	a, b := pair(limits)
	now := clock.Now()
	for key := range limits {
		a.AllowN(key, now, 5)
	}
	mustFlush(t, a)
	for key := range limits {
		b.AllowN(key, now, 4)
	}
	mustFlush(t, b)
	// a takes one more unit of every key; b flushes without deciding and
	// reads those near a limit.
	for key := range limits {
		a.AllowN(key, now, 1)
	}
	mustFlush(t, a)
	mustFlush(t, b)
	if st := b.SharedStats(); st.NearKeys != 3 {
		t.Errorf("b read %d keys for being near their limit, want short, long and both, once each", st.NearKeys)
	}
	for key, want := range map[string]int{"short": 0, "long": 0, "both": 0, "far": 991} {
		if r := b.Peek(key, now, 0); r.Remaining != want {
			t.Errorf("b's view of %s after its flush: %+v, want %d left", key, r, want)
		}
	}

	// x: a's 5 units are in the first minute, b's 1 in the third: b's
	// minute has 4 left, none of them another node's units, and its hour
	// 994, much more than the others could take before its next flush.
	a, b = pair(map[string][2]int{"x": {5, 1000}})
	a.AllowN("x", now, 5)
	mustFlush(t, a)
	clock.Advance(2 * time.Minute)
	b.AllowN("x", clock.Now(), 1)
	mustFlush(t, b)
	if r := b.Peek("x", clock.Now(), 0); r.Remaining != 4 || r.Window != time.Minute {
		t.Fatalf("b's view of x: %+v", r)
	}
	mustFlush(t, b)
	if st := b.SharedStats(); st.NearKeys != 0 {
		t.Errorf("b read x for being near its limit: %+v", st)
	}
}
