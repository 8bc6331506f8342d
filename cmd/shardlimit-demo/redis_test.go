package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// redisSum returns the sum of the counters under prefix in the Redis at
// addr: each counter is a hash whose field t is its total.
func redisSum(t *testing.T, c *redis.Client, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var sum int64
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := c.HGet(ctx, iter.Val(), "t").Int64()
		if err != nil && err != redis.Nil {
			t.Fatalf("HGET %s t: %v", iter.Val(), err)
		}
		sum += v
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN %s*: %v", prefix, err)
	}
	return sum
}

// flush makes every Redis-shared limiter of the demos flush now and waits
// (at most 5 s each) until it has: what they admitted is in Redis and each
// has read back the totals of the keys it sent.
func flush(t *testing.T, demos ...*demo) {
	t.Helper()
	for _, d := range demos {
		for drained := false; !drained; {
			select {
			case s := <-d.shared:
				d.limiters = append(d.limiters, s)
			default:
				drained = true
			}
		}
		if len(d.limiters) == 0 {
			t.Fatal("the demo built no Redis-shared limiter")
		}
		for _, s := range d.limiters {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := s.Flush(ctx)
			cancel()
			if err != nil {
				t.Fatalf("flush: %v", err)
			}
		}
	}
}

// wantSum checks that the counters under prefix add up to want.
func wantSum(t *testing.T, c *redis.Client, prefix string, want int64) {
	t.Helper()
	if got := redisSum(t, c, prefix); got != want {
		t.Fatalf("counters under %s add up to %d, want %d", prefix, got, want)
	}
}

// TestDemoTwoServersShareRedis runs two demo servers sharing one Redis (and
// one injected clock, so both are in the same windows) and shows one
// cluster-wide limit per client and route, against the per-server limits of
// two in-memory servers.
func TestDemoTwoServersShareRedis(t *testing.T) {
	addr := redistest.RequireRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })

	t.Run("in memory", func(t *testing.T) {
		clock := mwtest.NewClock()
		clock.At(mwtest.Sec(20))
		a, b := startDemoClock(t, clock), startDemoClock(t, clock)
		ca, cb := mwtest.NewClient(t, a.url, 1), mwtest.NewClient(t, b.url, 1)
		for i := range 10 {
			mwtest.Check(t, "A client-1 /foo", ca.Get("/foo", "X-Client-ID", "client-1"), 200, mwtest.H{mwtest.XRemaining: strconv.Itoa(9 - i)})
		}
		mwtest.Check(t, "A client-1 /foo #11", ca.Get("/foo", "X-Client-ID", "client-1"), 429, nil)
		// B never hears of A's ten: a second full budget.
		mwtest.Check(t, "B client-1 /foo", cb.Get("/foo", "X-Client-ID", "client-1"), 200, mwtest.H{mwtest.XRemaining: "9"})
	})

	t.Run("redis", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		clock := mwtest.NewClock()
		clock.At(mwtest.Sec(20))
		// Flushes every 20 ms, and by hand (flush) where the test needs one
		// to have happened.
		args := []string{"-redis", addr, "-redis-prefix", prefix, "-flush", "20ms"}
		a, b := startDemoClock(t, clock, args...), startDemoClock(t, clock, args...)
		for _, d := range []*demo{a, b} {
			if !strings.Contains(d.stdout.String(), "counters shared through Redis at "+addr) {
				t.Errorf("startup message %q", d.stdout)
			}
		}
		ca, cb := mwtest.NewClient(t, a.url, 1), mwtest.NewClient(t, b.url, 1)
		foo := prefix + "client-1-foo:" // rule client-1-foo: 10 a minute, fixed window
		get := func(name string, c *mwtest.Client, status int, rem string) {
			t.Helper()
			h := mwtest.H{mwtest.XLimit: "10", mwtest.XRemaining: rem}
			if status == 429 {
				h[mwtest.RetryAfter] = "40"
			}
			mwtest.Check(t, name, c.Get("/foo", "X-Client-ID", "client-1"), status, h)
		}

		for i := range 6 {
			get("A #"+strconv.Itoa(i+1), ca, 200, strconv.Itoa(9-i))
		}
		flush(t, a, b)
		wantSum(t, rc, foo, 6)
		// B decides its first request before it has read anything for
		// this client: the lag of asynchronous sharing.
		get("B #1", cb, 200, "9")
		flush(t, b) // B sends its 1 and reads back A's 6
		wantSum(t, rc, foo, 7)
		get("B #2", cb, 200, "2")
		get("B #3", cb, 200, "1")
		get("B #4", cb, 200, "0")
		get("B #5", cb, 429, "0")
		flush(t, a, b)
		wantSum(t, rc, foo, 10)
		// A last read the total when it flushed its own 6, so it admits one
		// more, flushes it, learns the total of 11 and denies. Eleven
		// admitted over both servers: the limit plus what one server
		// admitted before its next flush (in-memory servers: 20).
		get("A #7", ca, 200, "3")
		flush(t, a)
		wantSum(t, rc, foo, 11)
		get("A #8", ca, 429, "0")
		get("B #6", cb, 429, "0")

		// Other clients and routes have budgets of their own.
		mwtest.Check(t, "B client-2 /foo", cb.Get("/foo", "X-Client-ID", "client-2"), 200, mwtest.H{mwtest.XLimit: "20", mwtest.XRemaining: "19"})
		mwtest.Check(t, "A client-1 /bar", ca.Get("/bar", "X-Client-ID", "client-1"), 200, mwtest.H{mwtest.XLimit: "5", mwtest.XRemaining: "4", mwtest.XStrategy: "sliding_log"})
		mwtest.Check(t, "A anonymous /foo", ca.Get("/foo"), 200, mwtest.H{mwtest.XLimit: "5", mwtest.XRemaining: "4"})
		flush(t, a, b)
		wantSum(t, rc, prefix+"client-2-foo:", 1)
		wantSum(t, rc, prefix+"client-1-bar:", 1)
		wantSum(t, rc, foo, 11)
		// Keys are readable in Redis: the rule's name, then its namespace
		// and the identity, or the address.
		wantSum(t, rc, prefix+"client-1-foo:{"+httplimit.KeyNamespace("client-1-foo")+"id:client-1}:", 11)
		wantSum(t, rc, prefix+"anon-foo:{"+httplimit.KeyNamespace("anon-foo")+"ip:127.0.0.1}:", 1)
	})

	t.Run("gcra exact", func(t *testing.T) {
		// GCRA rules are decided in Redis: exact across servers.
		path := filepath.Join(t.TempDir(), "rules.json")
		rules := `{"rules": [{"name": "g", "path": "/foo", "algorithm": "gcra", "limit": 3, "window": "1m"}]}`
		if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
			t.Fatal(err)
		}
		clock := mwtest.NewClock()
		args := []string{"-rules", path, "-redis", addr, "-redis-prefix", redistest.Prefix(t)}
		a, b := startDemoClock(t, clock, args...), startDemoClock(t, clock, args...)
		ca, cb := mwtest.NewClient(t, a.url, 1), mwtest.NewClient(t, b.url, 1)
		for i, c := range []*mwtest.Client{ca, cb, ca} {
			mwtest.Check(t, "GCRA #"+strconv.Itoa(i+1), c.Get("/foo"), 200, mwtest.H{mwtest.XRemaining: strconv.Itoa(2 - i)})
		}
		mwtest.Check(t, "GCRA B #2", cb.Get("/foo"), 429, mwtest.H{mwtest.RetryAfter: "20"})
		mwtest.Check(t, "GCRA A #3", ca.Get("/foo"), 429, mwtest.H{mwtest.RetryAfter: "20"})
	})
}

// TestDemoRedisDown: with nothing listening at -redis the demo starts, says
// so, limits each client locally and never answers 5xx; its state changes
// are logged; it shuts down promptly.
func TestDemoRedisDown(t *testing.T) {
	d := startDemo(t, "-redis", "127.0.0.1:1", "-flush", "5ms")
	c := mwtest.NewClient(t, d.url, 1)
	for i := range 10 {
		mwtest.Check(t, "client-1 /foo", c.Get("/foo", "X-Client-ID", "client-1"), 200, mwtest.H{mwtest.XRemaining: strconv.Itoa(9 - i)})
	}
	mwtest.Check(t, "client-1 /foo #11", c.Get("/foo", "X-Client-ID", "client-1"), 429, mwtest.H{mwtest.RetryAfter: "60"})
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(d.stderr.String(), `msg="redis sync degraded: limits decided locally"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no state change logged within 5 s; stderr:\n%s", d.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(d.stderr.String(), `msg="redis not answering: deciding locally until it does" addr=127.0.0.1:1`) ||
		!strings.Contains(d.stderr.String(), "cause=unavailable") {
		t.Errorf("stderr %q", d.stderr)
	}
}
