package httpmw

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/internal/redistest"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// banNode is one server of a cluster sharing bans through Redis.
type banNode struct {
	mw  *Middleware
	srv *httptest.Server
	c   *mwtest.Client
}

// startBanNode starts a node with the rules js, clock clk and bans in
// store.
func startBanNode(t *testing.T, js string, clk shardlimit.Clock, store httplimit.BanStore) *banNode {
	t.Helper()
	mw, err := New(Config{Options: httplimit.Options{
		Rules: mwtest.MustRules(t, js), Clock: clk, Keys: httplimit.KeyConfig{TrustedProxies: mwtest.Loopback},
		BanStore: store, BanSyncInterval: 10 * time.Millisecond,
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(okHandler)))
	n := &banNode{mw: mw, srv: srv, c: mwtest.NewClient(t, srv.URL, 1)}
	t.Cleanup(n.stop)
	return n
}

// stop stops the node's server and middleware; idempotent.
func (n *banNode) stop() {
	n.srv.Close()
	n.mw.Close()
}

// waitFor waits, at most 10 s, until cond holds: the ban goroutine
// reports its rounds only through PolicyStats.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// readAfter waits until n has completed two more reads of the store, so
// one began after the call.
func (n *banNode) readAfter(t *testing.T) {
	t.Helper()
	r0 := n.mw.PolicyStats().StoreReads
	waitFor(t, "two reads of the store", func() bool { return n.mw.PolicyStats().StoreReads >= r0+2 })
}

// TestBansSharedThroughRedis runs two servers sharing one redis-server of
// the test's own: a client banned after K violations on one is banned on
// the other within a read of the store, stays banned when the first node
// restarts, and a lift on one node lifts it on both.
func TestBansSharedThroughRedis(t *testing.T) {
	rs := redistest.StartServer(t)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rc.Close() }) // after the nodes' last writes, before the server stops
	store, err := shardsync.NewBanStore(rc, redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	// Both nodes' clocks at one instant, years from Redis's: the store
	// judges bans by the nodes' clocks, never its own.
	clk := shardlimit.NewManualClock(mwtest.T0)
	const js = `{"rules": [{"name": "r", "prefix": "/", "limit": 1, "window": "1m",
		"ban": {"after": 2, "within": "1m", "for": "15m"}}]}`
	a := startBanNode(t, js, clk, store)
	b := startBanNode(t, js, clk, store)
	bad := mwtest.XFF("192.0.2.66")
	mwtest.Check(t, "a: first", a.c.Get("/", bad...), 200, nil)
	mwtest.Check(t, "a: denial 1", a.c.Get("/", bad...), 429, nil)
	mwtest.Check(t, "a: denial 2", a.c.Get("/", bad...), 429, nil)
	mwtest.Check(t, "a: banned", a.c.Get("/", bad...), 429, mwtest.H{mwtest.RetryAfter: "900"})
	waitFor(t, "the ban written", func() bool { return a.mw.PolicyStats().StoreWrites >= 1 })
	b.readAfter(t)
	mwtest.Check(t, "b: banned", b.c.Get("/", bad...), 429, mwtest.H{mwtest.RetryAfter: "900"})
	if bans := b.mw.Bans(); len(bans) != 1 || bans[0].Key != "ip:192.0.2.66" {
		t.Fatalf("b's bans: %+v", bans)
	}

	// Restart node a: still banned.
	a.stop()
	a = startBanNode(t, js, clk, store)
	waitFor(t, "a's first read", func() bool { return a.mw.PolicyStats().StoreReads >= 1 })
	clk.Advance(5 * time.Minute)
	mwtest.Check(t, "a restarted: banned", a.c.Get("/", bad...), 429, mwtest.H{mwtest.RetryAfter: "600"})

	// A lift on b lifts on a.
	if was, err := b.mw.LiftBan("r", "ip:192.0.2.66"); !was || err != nil {
		t.Fatalf("LiftBan: %v %v", was, err)
	}
	waitFor(t, "the lift written", func() bool { return b.mw.PolicyStats().StoreWrites >= 1 })
	a.readAfter(t)
	mwtest.Check(t, "a: lifted", a.c.Get("/", bad...), 200, nil)
	if st := a.mw.PolicyStats(); st.StoreErrors != 0 {
		t.Errorf("store errors: %+v", st)
	}
}

// TestBansStoreFaults runs a node whose Redis goes silent (a blackhole
// proxy) and then drops every connection: requests are still decided,
// bans still enforced locally, the failures counted; once Redis
// answers again the queued ban is written and another node enforces it.
func TestBansStoreFaults(t *testing.T) {
	rs := redistest.StartServer(t)
	px := redistest.StartProxy(t, rs.Addr)
	prefix := redistest.Prefix(t)
	faulty := redis.NewClient(&redis.Options{Addr: px.Addr, MaxRetries: -1, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	direct := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = faulty.Close(); _ = direct.Close() })
	storeA, err := shardsync.NewBanStore(faulty, prefix)
	if err != nil {
		t.Fatal(err)
	}
	storeB, err := shardsync.NewBanStore(direct, prefix)
	if err != nil {
		t.Fatal(err)
	}
	clk := shardlimit.NewManualClock(mwtest.T0)
	const js = `{"rules": [{"name": "r", "prefix": "/", "limit": 1, "window": "1m",
		"ban": {"after": 1, "within": "1m", "for": "15m"}}]}`
	a := startBanNode(t, js, clk, storeA)
	b := startBanNode(t, js, clk, storeB)
	bad := mwtest.XFF("192.0.2.66")
	for _, m := range []redistest.Mode{redistest.Blackhole, redistest.Drop} {
		px.SetMode(m)
		e0 := a.mw.PolicyStats().StoreErrors
		// The ban starts with the store down (requests never call it).
		clk.Advance(time.Hour)
		mwtest.Check(t, m.String()+": first", a.c.Get("/", bad...), 200, nil)
		mwtest.Check(t, m.String()+": denied", a.c.Get("/", bad...), 429, nil)
		mwtest.Check(t, m.String()+": banned", a.c.Get("/", bad...), 429, mwtest.H{mwtest.RetryAfter: "900"})
		waitFor(t, "a store error", func() bool { return a.mw.PolicyStats().StoreErrors > e0 })
		px.SetMode(redistest.Pass)
		w0 := a.mw.PolicyStats().StoreWrites
		waitFor(t, "the queued ban written", func() bool { return a.mw.PolicyStats().StoreWrites > w0 })
		b.readAfter(t)
		mwtest.Check(t, m.String()+": b banned", b.c.Get("/", bad...), 429, mwtest.H{mwtest.RetryAfter: "900"})
	}
}
