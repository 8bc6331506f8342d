package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestDemoLoginBan: the seed rules ban a client denied 3 times within a
// minute on /login for 15 minutes, and /status lists the ban.
func TestDemoLoginBan(t *testing.T) {
	d := startDemo(t, "-metrics", "127.0.0.1:0")
	d.clock.At(mwtest.Sec(20))
	c := mwtest.NewClient(t, d.url, 1)
	for range 3 {
		mwtest.Check(t, "login", c.Get("/login"), 200, nil)
	}
	for range 3 {
		mwtest.Check(t, "login denied", c.Get("/login"), 429, mwtest.H{mwtest.RetryAfter: "40"})
	}
	d.clock.At(mwtest.Sec(80)) // a new window: banned all the same
	r := c.Get("/login")
	mwtest.Check(t, "banned", r, 429, mwtest.H{mwtest.RetryAfter: "840"})
	if !strings.Contains(r.Body, "banned") {
		t.Errorf("body %q", r.Body)
	}
	mwtest.Check(t, "another route", c.Get("/foo"), 200, nil)
	st := mwtest.NewClient(t, d.obsURL, 1).Get("/status")
	if !regexp.MustCompile(`(?m)^login +ip:127\.0\.0\.1 +14m0s +1$`).MatchString(st.Body) {
		t.Errorf("/status lists no ban of 127.0.0.1 on login:\n%s", st.Body)
	}
	for _, line := range []string{
		"login: bans a client denied 3 times within 1m0s for 15m0s, x2 at each repeat up to 24h0m0s\n",
		"report: at most 2 requests in flight per client (503, Retry-After 1s)\n",
		"bans: 1 started, 1 requests refused while banned; 0 requests over a concurrency cap\n",
	} {
		if !strings.Contains(st.Body, line) {
			t.Errorf("/status lacks %q:\n%s", line, st.Body)
		}
	}
}

// TestDemoReportConcurrency: /report lets a client have 2 requests in
// flight; the third, while two take 2 s each, gets 503 with Retry-After:
// 1 at once.
func TestDemoReportConcurrency(t *testing.T) {
	d := startDemo(t)
	c := mwtest.NewClient(t, d.url, 4)
	done := make(chan int, 2)
	for range 2 {
		go func() {
			r, err := c.Do("GET", "/report?ms=2000")
			if err != nil {
				done <- 0
				return
			}
			done <- r.Status
		}()
	}
	mw := d.mw
	deadline := time.Now().Add(10 * time.Second)
	for mw.InFlight("report", "ip:127.0.0.1") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two slow reports never got in flight")
		}
		time.Sleep(time.Millisecond)
	}
	r := c.Get("/report")
	if r.Status != 503 || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("a third report: %d, Retry-After %q", r.Status, r.Header.Get("Retry-After"))
	}
	for range 2 {
		if s := <-done; s != 200 {
			t.Errorf("a slow report: %d", s)
		}
	}
}

// TestDemoBansShareRedis: two demo servers sharing a redis-server of the
// test's own: a client banned on one is banned on the other, and on a
// restarted one.
func TestDemoBansShareRedis(t *testing.T) {
	rs := redistest.StartServer(t)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	clock := mwtest.NewClock()
	clock.At(mwtest.Sec(20))
	args := []string{"-redis", rs.Addr, "-redis-prefix", redistest.Prefix(t), "-flush", "10ms"}
	a, b := startDemoClock(t, clock, args...), startDemoClock(t, clock, args...)
	ca, cb := mwtest.NewClient(t, a.url, 1), mwtest.NewClient(t, b.url, 1)
	for range 3 {
		mwtest.Check(t, "A login", ca.Get("/login"), 200, nil)
	}
	for range 3 {
		mwtest.Check(t, "A login denied", ca.Get("/login"), 429, nil)
	}
	waitUntil(t, "A's ban written", func() bool { return a.mw.PolicyStats().StoreWrites >= 1 })
	r0 := b.mw.PolicyStats().StoreReads
	waitUntil(t, "B's reads", func() bool { return b.mw.PolicyStats().StoreReads >= r0+2 })
	mwtest.Check(t, "B: banned", cb.Get("/login"), 429, mwtest.H{mwtest.RetryAfter: "900"})
	c := startDemoClock(t, clock, args...)
	waitUntil(t, "C's first read", func() bool { return c.mw.PolicyStats().StoreReads >= 1 })
	mwtest.Check(t, "C: banned", mwtest.NewClient(t, c.url, 1).Get("/login"), 429, mwtest.H{mwtest.RetryAfter: "900"})
}

// waitUntil waits, at most 10 s, until cond holds: the demo's ban
// goroutine reports its rounds only through counters.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
