package sync

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedResentFlushCountsOnce: go-redis sends a pipeline again when
// the connection breaks before its reply (Options.MaxRetries, default 3;
// a ClusterClient also on redirects). A proxy that lets every 3rd script
// call reach Redis and then closes the connection instead of answering
// makes the client send those flushes again (a flush's six items go in one
// call to a single server, in up to six to a Cluster: the re-send, the
// next call, goes through); every counter must still hold exactly the units
// the nodes admitted: a re-sent increment counted twice would make every
// node's view too high. Two nodes, both with go-redis's default retries.
func TestSharedResentFlushCountsOnce(t *testing.T) {
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.StartServer(t)
			p := redistest.StartCommandProxy(t, srv.Addr)
			retrying := func() RedisClient {
				c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: 3, ContextTimeoutEnabled: true,
					DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			testResentFlushCountsOnce(t, alg, retrying, []*redistest.Proxy{p}, newClient(t, srv.Addr))
		})
	}
}

// TestRedisClusterResentFlushCountsOnce: a ClusterClient re-sends a
// pipeline after a network error up to MaxRedirects times even with
// MaxRetries: -1 (the setting this package recommends); with a command
// proxy in front of every node (the client dials them through its
// Dialer) cutting every 3rd script reply, the counters of keys spread over
// the three masters hold exactly what the two nodes admitted.
func TestRedisClusterResentFlushCountsOnce(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	via := map[string]string{} // node address -> its proxy's
	var proxies []*redistest.Proxy
	for _, a := range cl.Addrs {
		p := redistest.StartCommandProxy(t, a)
		via[a] = p.Addr
		proxies = append(proxies, p)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	clusterClient := func(proxied bool) *redis.ClusterClient {
		opt := &redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1, ContextTimeoutEnabled: true,
			DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
		if proxied {
			opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if p, ok := via[addr]; ok {
					addr = p
				}
				return dialer.DialContext(ctx, network, addr)
			}
		}
		c := redis.NewClusterClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	testResentFlushCountsOnce(t, shardlimit.FixedWindow, func() RedisClient { return clusterClient(true) },
		proxies, clusterClient(false))
}

// testResentFlushCountsOnce runs two nodes of alg on clients from mk, whose
// commands pass through proxies, for 12 rounds of decisions and flushes
// with every 3rd script reply cut, and checks every counter through
// direct, a client that bypasses the proxies.
func testResentFlushCountsOnce(t *testing.T, alg shardlimit.Algorithm, mk func() RedisClient, proxies []*redistest.Proxy, direct redis.Cmdable) {
	clock := shardlimit.NewManualClock(at(time.Second))
	cfg := SharedConfig{
		Config:       shardlimit.Config{Algorithm: alg, Limit: 1000, Window: time.Minute, Buckets: 4, Clock: clock},
		FlushTimeout: 20 * time.Second, EvictionCheck: -1,
	}
	size := int64(time.Minute) / 4
	if alg == shardlimit.FixedWindow {
		cfg.Buckets, size = 0, int64(time.Minute)
	}
	nodes := []*Shared{newShared(t, mk(), cfg)}
	cfg.Prefix = nodes[0].backend.(*RedisBackend).prefix
	nodes = append(nodes, newShared(t, mk(), cfg))
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for _, p := range proxies {
		// An attempt cut, its re-send (the next reply) answered.
		p.SetTamper(3, redistest.Cut)
	}

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
	var scripts int64
	for _, p := range proxies {
		p.SetTamper(0, 0)
		scripts += p.Scripts()
	}
	for range 2 { // the second heals older buckets the first read short
		for _, s := range nodes {
			mustFlush(t, s)
		}
	}
	if scripts < 24 { // a flush sends at least one script call
		t.Fatalf("only %d script replies: the proxies cut few", scripts)
	}
	for _, k := range keys {
		for id, n := range want[k] {
			if got := counters(t, direct, nodes[0], []string{k}, id)[0]; got != n {
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
