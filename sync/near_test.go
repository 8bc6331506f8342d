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
