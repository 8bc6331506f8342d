package sync

import (
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedLostCountersHealedToSum: two nodes admit units of a key in one
// window, the store loses the key's counter (evicted, FLUSHALL, restarted
// empty), and after each node's next flush the counter holds the sum of
// what both admitted, each node restoring its own share: not the larger
// node's share, which would let the window admit the smaller one's again.
// Both nodes then see the whole count.
func TestSharedLostCountersHealedToSum(t *testing.T) {
	for _, tc := range []struct {
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
	} {
		t.Run(tc.name, func(t *testing.T) { testHealedToSum(t, tc.lose) })
	}
}

func testHealedToSum(t *testing.T, lose func(*testing.T, *redistest.Server, []string)) {
	srv := redistest.StartServer(t)
	clock := shardlimit.NewManualClock(at(time.Second))
	now := clock.Now()
	cfg := SharedConfig{
		Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 100, Window: time.Minute, Clock: clock},
		Prefix: redistest.Prefix(t),
		// The flushes are the test's; a restart must not make them Degraded.
		FlushTimeout: 5 * time.Second, FailAfter: 1000,
	}
	a := newShared(t, newClient(t, srv.Addr), cfg)
	b := newShared(t, newClient(t, srv.Addr), cfg)
	id := now.UnixNano() / int64(time.Minute)
	key := "k"
	admit := func(s *Shared, n int) {
		t.Helper()
		if r := s.AllowN(key, now, n); r.Err != nil || !r.Allowed {
			t.Fatalf("AllowN(%d): %+v", n, r)
		}
	}
	admit(a, 30)
	admit(b, 20)
	mustFlush(t, a)
	mustFlush(t, b)
	c := newClient(t, srv.Addr)
	if got := counters(t, c, a, []string{key}, id)[0]; got != 50 {
		t.Fatalf("counter %d before the loss, want 50", got)
	}

	lose(t, srv, []string{a.backend.(*RedisBackend).CounterKey(key, id)})
	admit(a, 1) // traffic goes on: 31 and 21 admitted
	admit(b, 1)
	// A flush whose connection the restart broke may be MaybeApplied: the
	// next one heals its units by the floor. The verdict is the count.
	var got int64
	for range 5 {
		_ = a.Flush(ctxT(t, 5*time.Second))
		_ = b.Flush(ctxT(t, 5*time.Second))
		if got = counters(t, c, a, []string{key}, id)[0]; got == 52 {
			break
		}
	}
	if got != 52 {
		t.Fatalf("counter %d after the loss and both nodes' flushes, want 31 + 21 = 52", got)
	}
	// b flushed last and read the whole count; a reads it at its next
	// flush of the key.
	admit(a, 1)
	mustFlush(t, a)
	if r := a.Peek(key, now, 0); r.Remaining != 100-53 {
		t.Errorf("node a: remaining %d, want 100 - 53", r.Remaining)
	}
	if r := b.Peek(key, now, 0); r.Remaining != 100-52 {
		t.Errorf("node b: remaining %d, want 100 - 52", r.Remaining)
	}
	fields, err := c.HGetAll(ctxT(t, 5*time.Second), a.backend.(*RedisBackend).CounterKey(key, id)).Result()
	if err != nil || len(fields) != 3 || fields["t"] != "53" || fields["n:"+a.node] != "32" || fields["n:"+b.node] != "21" {
		t.Errorf("counter hash %v, %v; want t = 53 and each node's share", fields, err)
	}
}
