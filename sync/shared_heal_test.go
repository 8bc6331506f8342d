package sync

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedLostCountersHealedToSum: two nodes admit units of a key in one
// window, the store loses the key's counters (evicted, FLUSHALL, restarted
// empty), and after the nodes' next flushes every counter holds the sum of
// what both admitted, each node restoring its own share: not the larger
// node's share, which would let the window admit the smaller one's again.
// With the sliding counter the window's older bucket, which no further
// decision adds to, is healed too. Both nodes then see the whole count.
func TestSharedLostCountersHealedToSum(t *testing.T) {
	losses := []struct {
		name string
		lose func(t *testing.T, srv *redistest.Server, keys []string)
	}{
		{"evicted", func(t *testing.T, srv *redistest.Server, keys []string) {
			for _, k := range keys {
				if _, err := redistest.Do(srv.Addr, "DEL", k); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"flushall", func(t *testing.T, srv *redistest.Server, _ []string) {
			if _, err := redistest.Do(srv.Addr, "FLUSHALL"); err != nil {
				t.Fatal(err)
			}
		}},
		{"restarted empty", func(t *testing.T, srv *redistest.Server, _ []string) {
			srv.Stop()
			srv.Start()
		}},
	}
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter} {
		for _, tc := range losses {
			t.Run(alg.String()+"/"+tc.name, func(t *testing.T) { testHealedToSum(t, alg, tc.lose) })
		}
	}
}

func testHealedToSum(t *testing.T, alg shardlimit.Algorithm, lose func(*testing.T, *redistest.Server, []string)) {
	srv := redistest.StartServer(t)
	clock := shardlimit.NewManualClock(at(time.Second))
	cfg := SharedConfig{
		Config: shardlimit.Config{Algorithm: alg, Limit: 100, Window: time.Minute, Buckets: 4, Clock: clock},
		Prefix: redistest.Prefix(t),
		// The flushes are the test's; a restart must not make them Degraded.
		FlushTimeout: 5 * time.Second, FailAfter: 1000,
	}
	size := int64(time.Minute) // the counters' bucket
	if alg == shardlimit.FixedWindow {
		cfg.Buckets = 0
	} else {
		size /= 4
	}
	a := newShared(t, newClient(t, srv.Addr), cfg)
	b := newShared(t, newClient(t, srv.Addr), cfg)
	const key = "k"
	want := map[int64]int64{}                        // bucket id -> units both admitted in it
	own := map[*Shared]map[int64]int64{a: {}, b: {}} // and each one
	admit := func(s *Shared, n int) {
		t.Helper()
		now := clock.Now()
		if r := s.AllowN(key, now, n); r.Err != nil || !r.Allowed {
			t.Fatalf("AllowN(%d): %+v", n, r)
		}
		want[now.UnixNano()/size] += int64(n)
		own[s][now.UnixNano()/size] += int64(n)
	}
	c := newClient(t, srv.Addr)
	check := func() string {
		for id, n := range want {
			if got := counters(t, c, a, []string{key}, id)[0]; got != n {
				return fmt.Sprintf("bucket %d: counter %d, want %d", id, got, n)
			}
		}
		return ""
	}
	admit(a, 30)
	admit(b, 20)
	clock.Advance(15 * time.Second) // the sliding counter's next bucket
	admit(a, 1)
	admit(b, 1)
	mustFlush(t, a)
	mustFlush(t, b)
	if msg := check(); msg != "" {
		t.Fatalf("before the loss: %s", msg)
	}

	var keys []string
	for id := range want {
		keys = append(keys, a.backend.(*RedisBackend).CounterKey(key, id))
	}
	lose(t, srv, keys)
	admit(a, 1) // traffic goes on
	admit(b, 1)
	// A flush whose connection the restart broke may be MaybeApplied: the
	// next one heals its units by the floor. The verdict is the counts.
	msg := "not flushed"
	for range 5 {
		_ = a.Flush(ctxT(t, 5*time.Second))
		_ = b.Flush(ctxT(t, 5*time.Second))
		if msg = check(); msg == "" {
			break
		}
	}
	if msg != "" {
		t.Fatalf("after the loss and the nodes' flushes: %s", msg)
	}
	// b, flushing last, reads the whole count.
	admit(a, 1)
	admit(b, 1)
	mustFlush(t, a)
	mustFlush(t, b)
	now := clock.Now()
	if r := b.Peek(key, now, 0); r.Remaining != 100-56 {
		t.Errorf("remaining %d, want 100 - 56", r.Remaining)
	}
	id := now.UnixNano() / size
	fields, err := c.HGetAll(ctxT(t, 5*time.Second), a.backend.(*RedisBackend).CounterKey(key, id)).Result()
	// t, each node's share n:<node> and its last flush's sequence q:<node>
	if err != nil || len(fields) != 5 || fields["t"] != fmt.Sprint(want[id]) ||
		fields["q:"+a.node] == "" || fields["q:"+b.node] == "" ||
		fields["n:"+a.node] != fmt.Sprint(own[a][id]) || fields["n:"+b.node] != fmt.Sprint(own[b][id]) {
		t.Errorf("counter hash %v, %v; want t = %d and each node's share", fields, err, want[id])
	}
}
