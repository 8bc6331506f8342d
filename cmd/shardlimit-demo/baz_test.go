package main

import (
	"github.com/redis/go-redis/v9"

	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestDemoBaz runs the demo's /baz, limited per client to 3 a second and
// 10 a minute (fixed windows), with a real client and the injected clock:
// three quick calls pass, the fourth in the same second is 429 with
// Retry-After 1, the eleventh in the minute is 429 with the minute's
// Retry-After, and RateLimit-Policy shows both policies. Each client has
// its budget: client-1 by its identity, anyone else by address.
func TestDemoBaz(t *testing.T) {
	d := startDemo(t)
	c := mwtest.NewClient(t, d.url, 1)
	const policy = `"baz-1s";q=3;w=1, "baz-1m";q=10;w=60`
	show := func(name string, r mwtest.Resp) {
		t.Helper()
		var b strings.Builder
		for _, f := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy",
			"RateLimit", "X-RateLimit-Window-Ms", "Retry-After"} {
			if v := r.Header.Get(f); v != "" {
				fmt.Fprintf(&b, "\n  %s: %s", f, v)
			}
		}
		t.Logf("%s: %d %q%s", name, r.Status, r.Body, b.String())
	}
	for i, at := range []float64{120, 120.1, 120.2} {
		d.clock.At(mwtest.Sec(at))
		r := c.Get("/baz")
		mwtest.Check(t, fmt.Sprintf("t=%v", at), r, 200, mwtest.H{
			mwtest.XLimit: "3", mwtest.XRemaining: strconv.Itoa(2 - i), mwtest.XReset: "1", mwtest.XWindowMs: "1000",
			mwtest.RLPolicy: policy, mwtest.RL: fmt.Sprintf(`"baz-1s";r=%d;t=1`, 2-i), mwtest.RetryAfter: mwtest.Absent,
		})
		if r.Body != "baz: ok\n" {
			t.Errorf("t=%v: body %q", at, r.Body)
		}
		if i == 0 {
			show("1st call", r)
		}
	}
	d.clock.At(mwtest.Sec(120.3))
	r := c.Get("/baz")
	mwtest.Check(t, "4th in the second", r, 429, mwtest.H{
		mwtest.XLimit: "3", mwtest.XRemaining: "0", mwtest.RetryAfter: "1",
		mwtest.RLPolicy: policy, mwtest.RL: `"baz-1s";r=0;t=1`,
	})
	show("4th call", r)
	// Another client has a budget of its own.
	mwtest.Check(t, "client-1", c.Get("/baz", "X-Client-ID", "client-1"), 200, mwtest.H{mwtest.XLimit: "3", mwtest.XRemaining: "2"})

	// The 4th call counted nowhere: 3 used in the minute; 6 more in two
	// seconds, the 10th at t=123.
	for s := 121; s <= 122; s++ {
		d.clock.At(mwtest.Sec(float64(s)))
		for i := range 3 {
			mwtest.Check(t, fmt.Sprintf("t=%d #%d", s, i+1), c.Get("/baz"), 200, nil)
		}
	}
	d.clock.At(mwtest.Sec(123))
	r = c.Get("/baz")
	mwtest.Check(t, "10th in the minute", r, 200, mwtest.H{
		mwtest.XLimit: "10", mwtest.XRemaining: "0", mwtest.XReset: "57", mwtest.XWindowMs: "60000",
		mwtest.RLPolicy: policy, mwtest.RL: `"baz-1m";r=0;t=57`,
	})
	d.clock.At(mwtest.Sec(123.5))
	r = c.Get("/baz")
	mwtest.Check(t, "11th in the minute", r, 429, mwtest.H{
		mwtest.XLimit: "10", mwtest.XRemaining: "0", mwtest.XReset: "57", mwtest.XWindowMs: "60000", mwtest.RetryAfter: "57",
		mwtest.RLPolicy: policy, mwtest.RL: `"baz-1m";r=0;t=57`,
	})
	if want := "Too Many Requests: limit of 10 per 60 s reached; retry in 57 s.\n"; r.Body != want {
		t.Errorf("11th: body %q, want %q", r.Body, want)
	}
	show("11th call", r)
	d.clock.At(mwtest.Sec(179.999))
	mwtest.Check(t, "just before the minute ends", c.Get("/baz"), 429, mwtest.H{mwtest.RetryAfter: "1"})
	d.clock.At(mwtest.Sec(180))
	mwtest.Check(t, "the next minute", c.Get("/baz"), 200, mwtest.H{mwtest.XLimit: "3", mwtest.XRemaining: "2"})
}

// TestDemoBazWithRedis checks that the demo with -redis shares /baz's two
// limits through Redis like the other rules: each window's counter holds
// the three units admitted.
func TestDemoBazWithRedis(t *testing.T) {
	addr := redistest.RequireRedis(t)
	prefix := redistest.Prefix(t)
	d := startDemo(t, "-redis", addr, "-redis-prefix", prefix)
	c := mwtest.NewClient(t, d.url, 1)
	d.clock.At(mwtest.Sec(20))
	for i := range 3 {
		mwtest.Check(t, fmt.Sprintf("/baz #%d", i+1), c.Get("/baz"), 200, mwtest.H{mwtest.XLimit: "3", mwtest.XRemaining: strconv.Itoa(2 - i)})
	}
	mwtest.Check(t, "/baz #4", c.Get("/baz"), 429, mwtest.H{mwtest.RetryAfter: "1"})
	if log := d.stderr.String(); strings.Contains(log, "not shared") {
		t.Errorf("log %q: /baz not shared", log)
	}
	flush(t, d)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	// Both windows' counters: 3 each.
	if got := redisSum(t, rc, prefix+"baz:"); got != 6 {
		t.Errorf("Redis holds %d units of /baz over both windows, want 3 each", got)
	}
}
