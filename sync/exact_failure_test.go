package sync

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestExactFallbackRecordsUsage: units Redis admitted are recorded in the
// local fallback, so losing Redis does not hand out a fresh budget.
func TestExactFallbackRecordsUsage(t *testing.T) {
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	ch := newChanges()
	e := newExact(t, newClient(t, p.Addr), ExactConfig{Config: fixedCfg(5, time.Minute),
		ProbeInterval: 10 * time.Millisecond, DegradeAfter: time.Nanosecond, OnStateChange: ch.record})
	now := time.Now()
	for range 3 {
		if !e.AllowN("k", now, 1).Allowed {
			t.Fatal("denied while healthy")
		}
	}
	p.SetMode(redistest.Drop)
	got := 0
	for range 5 {
		if e.AllowN("k", now, 1).Allowed {
			got++
		}
	}
	if got != 2 {
		t.Fatalf("fallback admitted %d (state %v), want 2 (5 - 3 already used)", got, e.State())
	}
	ch.wait(t, Degraded, 30*time.Second) // the background goroutine's checks fail too
}

// TestRedisDownExact: with nothing listening or a black hole,
// NewExact returns at once, every call returns within the timeout (not
// the client's own), three failures in a row degrade the limiter
// (DegradeAfter 1ns; the first is a call, the others the background
// goroutine's checks of the store), calls after the first failed one never
// touch Redis (none is sent, all are decided by the policy), and the local
// fallback still enforces the limit.
func TestRedisDownExact(t *testing.T) {
	const timeout = 500 * time.Millisecond
	hole := redistest.StartProxy(t, "127.0.0.1:1")
	hole.SetMode(redistest.Blackhole)
	for name, addr := range map[string]string{"refused": "127.0.0.1:1", "blackhole": hole.Addr} {
		t.Run(name, func(t *testing.T) {
			var changes []StateChange
			var mu stdsync.Mutex
			start := time.Now()
			e := newExact(t, newClient(t, addr), ExactConfig{
				Config:        fixedCfg(5, time.Minute),
				Timeout:       timeout,
				DegradeAfter:  time.Nanosecond,
				ProbeInterval: 20 * time.Millisecond,
				OnStateChange: func(c StateChange) { mu.Lock(); changes = append(changes, c); mu.Unlock() },
			})
			if d := time.Since(start); d > time.Second {
				t.Fatalf("NewExact took %v", d)
			}
			lat := make([]time.Duration, 0, 10_000)
			for i := range 10_000 {
				s := time.Now()
				r := e.AllowN(fmt.Sprintf("key%d", i%100), s, 1)
				lat = append(lat, time.Since(s))
				if r.Err != nil {
					t.Fatalf("call %d: %v", i, r.Err)
				}
			}
			// The call that failed: from it on, the policy decides.
			sent := int(e.ExactStats().Calls)
			if sent != 1 {
				t.Fatalf("%d calls sent to Redis, want 1", sent)
			}
			for i, d := range lat[:sent] {
				if d >= 10*time.Second { // newClient's ReadTimeout: the Timeout was not applied
					t.Errorf("call %d took %v, timeout %v", i, d, timeout)
				}
			}
			// No decision after the limiter degraded waited for Redis: none
			// was sent (ExactStats.Calls above), and a degraded decision
			// takes no lock the probe holds. How long they took is the
			// machine's speed, logged but not judged: on a loaded machine
			// under -race the 99th percentile passed 1 ms.
			rest := lat[sent:]
			slices.Sort(rest)
			p99, mx := rest[len(rest)*99/100], rest[len(rest)-1]
			t.Logf("after the first %d calls (%v): p99 %v, max %v", sent, lat[:sent], p99, mx)
			now := time.Now()
			got := 0
			for range 6 {
				if r := e.AllowN("k", now, 1); r.Allowed {
					got++
				}
			}
			if got != 5 {
				t.Errorf("fallback admitted %d of 6, want 5", got)
			}
			st := e.ExactStats()
			if st.Calls != 1 || st.PolicyDecisions != 10_006 {
				t.Errorf("stats %+v", st)
			}
			// The background goroutine's checks fail, the limiter degrades
			// and the change is reported before it starts probing; wait for
			// it, and for probes that failed.
			eventually(t, 30*time.Second, func() string {
				mu.Lock()
				defer mu.Unlock()
				if st := e.ExactStats(); len(changes) == 0 || st.ProbeFailures < 2 {
					return fmt.Sprintf("changes %+v, stats %+v", changes, st)
				}
				return ""
			})
			if st := e.ExactStats(); st.State != Degraded || st.Trips != 1 {
				t.Errorf("stats %+v", st)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(changes) != 1 || changes[0].From != Healthy || changes[0].To != Degraded || changes[0].Err == nil {
				t.Errorf("state changes %+v", changes)
			}
		})
	}
}

// TestExactRecovery: a black-holed Redis degrades the limiter; once it
// answers again the probe restores it, the callback sees both changes, and
// decisions come from Redis again.
//
// Each verdict rests on what the limiter counted, not on how long a call
// took: a call into the black hole must be sent and counted as a timeout
// (so it waited for its deadline), and must end well before the client's
// own 10 s ReadTimeout (so the deadline was the Timeout). A healthy call
// that a loaded machine made slower than the Timeout is a timeout too, and
// once started a run of failures: the test makes decisions until one is
// decided by Redis before it black-holes the proxy, and measures every
// count from there.
func TestExactRecovery(t *testing.T) {
	// A Timeout with room for a loaded machine, far below the client's
	// 10 s ReadTimeout, the wait if the Timeout were not applied.
	const timeout = 500 * time.Millisecond
	const clientTimeout = 10 * time.Second // newClient's ReadTimeout
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	client := newClient(t, p.Addr)
	if err := client.Ping(ctxT(t, 10*time.Second)).Err(); err != nil { // a pooled connection
		t.Fatal(err)
	}
	changes := make(chan StateChange, 64)
	e := newExact(t, client, ExactConfig{
		Config:           fixedCfg(1_000_000, time.Minute),
		Timeout:          timeout,
		DegradeAfter:     time.Nanosecond,
		ProbeInterval:    20 * time.Millisecond,
		MaxProbeInterval: 40 * time.Millisecond,
		OnStateChange:    func(c StateChange) { changes <- c },
	})
	// change returns the next state change, failing the test if none
	// comes within 30 s.
	change := func(what string) StateChange {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("no state change within 30s: %s; stats %+v", what, e.ExactStats())
			return StateChange{}
		}
	}
	// fromRedis makes decisions until one is decided by Redis: a call is
	// sent and does not fail. A limiter a slow moment degraded recovers
	// by its probe, through the proxy in Pass mode.
	fromRedis := func(what string) {
		t.Helper()
		eventually(t, 30*time.Second, func() string {
			before := e.ExactStats()
			r := e.AllowN("k", time.Now(), 1)
			after := e.ExactStats()
			if after.Calls == before.Calls+1 && after.Errors == before.Errors && r.Allowed {
				return ""
			}
			return fmt.Sprintf("%s: no decision by Redis: %+v, stats %+v", what, r, after)
		})
	}
	fromRedis("before the black hole")
	base := e.ExactStats()
	for range 2 * base.Trips { // changes of a slow start, if any
		change("a slow start's")
	}

	p.SetMode(redistest.Blackhole)
	for i := range 1 { // the first failed call; the policy decides after it
		before := e.ExactStats()
		start := time.Now()
		r := e.AllowN("k", time.Now(), 1)
		d := time.Since(start)
		after := e.ExactStats()
		if after.Calls != before.Calls+1 || after.Timeouts != before.Timeouts+1 {
			t.Fatalf("call %d to a black hole (%v, %+v) was not sent and timed out: stats before %+v, after %+v", i, d, r, before, after)
		}
		if d >= clientTimeout {
			t.Fatalf("call %d to a black hole took %v: the Timeout %v was not applied", i, d, timeout)
		}
	}
	// The background goroutine's checks of the store time out too: the
	// third failure in a row degrades the limiter.
	if c := change("to degraded"); c.From != Healthy || c.To != Degraded || !isTimeout(c.Err) || !errors.Is(c.Err, ErrUnavailable) {
		t.Fatalf("change %+v, want to degraded by a timeout", c)
	}
	if st := e.ExactStats(); st.State != Degraded || st.Trips != base.Trips+1 || st.Timeouts != base.Timeouts+1 {
		t.Fatalf("after a timeout and failed checks: stats %+v, from %+v", st, base)
	}
	eventually(t, 30*time.Second, func() string { // a probe failed in the black hole
		if e.ExactStats().ProbeFailures == base.ProbeFailures {
			return "no failed probe"
		}
		return ""
	})
	p.SetMode(redistest.Pass)
	if c := change("recovery"); c.From != Degraded || c.To != Healthy || c.Err != nil {
		t.Fatalf("change %+v, want a recovery", c)
	}
	if st := e.ExactStats(); st.Trips != base.Trips+1 || st.Recoveries != base.Recoveries+1 {
		t.Fatalf("after the recovery: stats %+v, from %+v", st, base)
	}
	fromRedis("after the recovery")
}

// TestExactLaxClient: a client that ignores context deadlines (go-redis's
// default) still cannot make a decision wait past the Timeout.
func TestExactLaxClient(t *testing.T) {
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	lax := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = lax.Close() })
	e := newExact(t, lax, ExactConfig{Config: fixedCfg(5, time.Minute), Timeout: DefaultTimeout, ProbeInterval: time.Hour})
	e.Allow("k")
	p.SetMode(redistest.Blackhole)
	start := time.Now()
	r := e.AllowN("k", time.Now(), 1)
	if d := time.Since(start); d > DefaultTimeout+time.Second || !r.Allowed { // the lax client alone waits 3 s
		t.Fatalf("call took %v: %+v", d, r)
	}
	p.SetMode(redistest.Drop) // end the abandoned call before cleanup
}

// TestExactPolicies: fail open admits what the limit could ever admit,
// fail closed denies with the probe's delay; neither touches the fallback.
func TestExactPolicies(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	open := newExact(t, c, ExactConfig{Config: fixedCfg(3, time.Minute), Policy: FailOpen, Timeout: DefaultTimeout, ProbeInterval: time.Hour})
	for i := range 5 {
		if r := open.AllowN("k", time.Now(), 1); !r.Allowed || r.Remaining != 2 || r.Limit != 3 {
			t.Fatalf("fail open call %d: %+v", i, r)
		}
	}
	if r := open.AllowN("k", time.Now(), 4); r.Allowed || r.RetryAfter != shardlimit.Never {
		t.Fatalf("fail open, n > limit: %+v", r)
	}
	closed := newExact(t, c, ExactConfig{Config: fixedCfg(3, time.Minute), Policy: FailClosed, Timeout: DefaultTimeout, ProbeInterval: 2 * time.Second})
	for i := range 3 {
		if r := closed.AllowN("k", time.Now(), 1); r.Allowed || r.RetryAfter != 2*time.Second || r.Err != nil {
			t.Fatalf("fail closed call %d: %+v", i, r)
		}
	}
	if r := closed.AllowN("k", time.Now(), 0); !r.Allowed {
		t.Fatalf("fail closed peek: %+v", r)
	}
	if open.Len() != 0 || closed.Len() != 0 || open.Sweep(time.Now()) != 0 {
		t.Fatal("a policy without fallback holds keys")
	}
}

// TestExactGarbageReplies: any malformed reply is decided by the policy,
// counted as an error, and does not degrade the limiter (Redis answered).
func TestExactGarbageReplies(t *testing.T) {
	replies := []string{
		"+OK\r\n", ":1\r\n", "$-1\r\n", "*-1\r\n", "*3\r\n:1\r\n:1\r\n:1\r\n",
		"*5\r\n:1\r\n:1\r\n:1\r\n$1\r\n0\r\n:1\r\n", "*5\r\n:2\r\n:0\r\n:0\r\n:0\r\n:1\r\n",
		"*5\r\n:1\r\n:99\r\n:0\r\n:0\r\n:1\r\n", "*5\r\n:0\r\n:0\r\n:-5\r\n:0\r\n:1\r\n",
		"*5\r\n:1\r\n:0\r\n:0\r\n:7\r\n:1\r\n", "*5\r\n:0\r\n:0\r\n:0\r\n:-2\r\n:1\r\n",
		"*5\r\n*1\r\n:1\r\n:0\r\n:0\r\n:0\r\n:1\r\n", "-ERR boom\r\n", "-NOSCRIPT x\r\n",
	}
	var next atomic.Int64
	f := redistest.StartFake(t, func(args []string) []byte {
		switch strings.ToUpper(args[0]) {
		case "EVALSHA", "EVAL":
			return []byte(replies[int(next.Add(1)-1)%len(replies)])
		}
		return nil
	})
	e := newExact(t, newClient(t, f.Addr), ExactConfig{Config: fixedCfg(2, time.Minute)})
	now := time.Now()
	for i := range 2 * len(replies) {
		r := e.AllowN("k", now, 1)
		if r.Err != nil || r.Allowed != (i < 2) {
			t.Fatalf("call %d: %+v, want the fallback's decision", i, r)
		}
	}
	st := e.ExactStats()
	if st.State != Healthy || st.Trips != 0 || st.Errors != st.Calls || st.PolicyDecisions != uint64(2*len(replies)) {
		t.Fatalf("stats %+v", st)
	}
}

// TestExactCorruptState: a state key holding foreign data is an error reply
// (decided by the policy); the key is left alone.
func TestExactCorruptState(t *testing.T) {
	c := sharedClient(t)
	ctx := ctxT(t, 5*time.Second)
	for _, cfg := range []shardlimit.Config{fixedCfg(2, time.Minute), counterCfg(2, time.Minute, 6), gcraCfg(2, time.Minute)} {
		e := newExact(t, c, ExactConfig{Config: cfg})
		c.Set(ctx, e.StateKeys("str")[0], "x", time.Minute)
		c.HSet(ctx, e.StateKeys("bad")[0], "w", "abc", "c", "1", "t", "1e3", "r", "0", "l", "2", "5", "-1")
		c.Expire(ctx, e.StateKeys("bad")[0], time.Minute)
		for _, key := range []string{"str", "bad"} {
			if r := e.AllowN(key, time.Now(), 1); r.Err != nil || !r.Allowed {
				t.Errorf("%v %s: %+v", cfg.Algorithm, key, r)
			}
		}
		if st := e.ExactStats(); st.Errors != 2 || st.State != Healthy {
			t.Errorf("%v: stats %+v", cfg.Algorithm, st)
		}
		if v := c.Get(ctx, e.StateKeys("str")[0]).Val(); v != "x" {
			t.Errorf("foreign key changed to %q", v)
		}
	}
}

// TestExactNoScript: after SCRIPT FLUSH, the next decision reloads the
// script (EVALSHA, NOSCRIPT, EVAL) without an error.
func TestExactNoScript(t *testing.T) {
	s := redistest.StartServer(t)
	e := newExact(t, newClient(t, s.Addr), ExactConfig{Config: gcraCfg(3, time.Minute)})
	for i := range 3 {
		if i == 1 {
			if _, err := redistest.Do(s.Addr, "SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		if r := e.AllowN("k", time.Now(), 1); !r.Allowed || r.Remaining != 2-i {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	if st := e.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
		t.Fatalf("stats %+v", st)
	}
}
