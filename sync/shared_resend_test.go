package sync

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedResentFlushCountsOnce: go-redis sends a pipeline again when
// the connection breaks before its reply (Options.MaxRetries, default 3;
// a ClusterClient also on redirects). A proxy that lets every 4th script
// call reach Redis and then closes the connection instead of answering
// makes the client send those flushes again (three items a flush: some
// re-sends go through, some are cut again and their units are healed by
// the next flush's floor); every counter must still hold exactly the
// units the nodes admitted: a re-sent increment counted twice would make
// every node's view too high. Two nodes, both with go-redis's default
// retries.
func TestSharedResentFlushCountsOnce(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) { testResentFlushCountsOnce(t, alg) })
	}
}

func testResentFlushCountsOnce(t *testing.T, alg shardlimit.Algorithm) {
	srv := redistest.StartServer(t)
	p := redistest.StartCommandProxy(t, srv.Addr)
	retrying := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: 3, ContextTimeoutEnabled: true,
			DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	clock := shardlimit.NewManualClock(at(time.Second))
	cfg := SharedConfig{
		Config:       shardlimit.Config{Algorithm: alg, Limit: 1000, Window: time.Minute, Buckets: 4, Clock: clock},
		FlushTimeout: 20 * time.Second, EvictionCheck: -1,
	}
	size := int64(time.Minute) / 4
	if alg == shardlimit.FixedWindow {
		cfg.Buckets, size = 0, int64(time.Minute)
	}
	nodes := []*Shared{newShared(t, retrying(), cfg)}
	cfg.Prefix = nodes[0].backend.(*RedisBackend).prefix
	nodes = append(nodes, newShared(t, retrying(), cfg))
	p.SetTamper(4, redistest.Cut)

	keys := []string{"a", "b", "c"}
	want := map[string]map[int64]int64{} // key -> bucket -> units admitted
	for _, k := range keys {
		want[k] = map[int64]int64{}
	}
	for round := range 12 {
		for i, s := range nodes {
			for j, k := range keys {
				n := 1 + (round+i+j)%3
				now := clock.Now()
				if r := s.AllowN(k, now, n); !r.Allowed || r.Err != nil {
					t.Fatalf("round %d: AllowN(%s, %d): %+v", round, k, n, r)
				}
				want[k][now.UnixNano()/size] += int64(n)
			}
			// The flush's reply may be lost for good (its re-send cut
			// too): then the next flush heals it by its floor.
			_ = s.Flush(ctxT(t, 20*time.Second))
		}
		clock.Advance(4 * time.Second) // 12 rounds within the minute
	}
	p.SetTamper(0, 0)
	for _, s := range nodes {
		mustFlush(t, s)
	}
	if p.Scripts() < 20 {
		t.Fatalf("only %d script replies: the proxy cut few", p.Scripts())
	}
	c := newClient(t, srv.Addr)
	for _, k := range keys {
		for id, n := range want[k] {
			if got := counters(t, c, nodes[0], []string{k}, id)[0]; got != n {
				t.Errorf("key %s, bucket %d: counter %d, want %d admitted", k, id, got, n)
			}
		}
	}
	for i, s := range nodes {
		st := s.SharedStats()
		t.Logf("node %d: %d flushes, %d failed, %d items, %d errors, %d units sent, %d unknown", i,
			st.Flushes, st.FailedFlushes, st.Items, st.ItemErrors, st.SentUnits, st.UnknownUnits)
	}
}

// TestRedisBackendDialErrorProvesNothingWithRetries: a refused dial proves
// an Item unapplied only if the client never sends a command twice; with
// go-redis's retries on, the refused dial may be a re-send's after an
// applied first attempt, so the Item is MaybeApplied (healed by the next
// floor, never sent again as a delta).
func TestRedisBackendDialErrorProvesNothingWithRetries(t *testing.T) {
	for _, tc := range []struct {
		retries int
		want    Outcome
	}{{-1, NotApplied}, {3, MaybeApplied}} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: tc.retries, DialerRetries: 1,
			MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
		b, err := NewRedisBackend(c, redistest.Prefix(t))
		if err != nil {
			t.Fatal(err)
		}
		out := b.Add(ctxT(t, 10*time.Second), []Item{{Key: "k", ID: 1, Delta: 1, TTL: time.Second, Seq: 1}}, nil)
		if len(out) != 1 || out[0].Outcome != tc.want || !neverSent(out[0].Err) {
			t.Errorf("MaxRetries %d: %+v, want %v with a dial error", tc.retries, out, tc.want)
		}
		_ = c.Close()
	}
}
