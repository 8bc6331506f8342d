package sync

import (
	"errors"
	"fmt"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Fault tests of Exact against private Redis servers (issue 11).

// TestExactDegradesOnSustainedFailure: a private Redis paused. Calls that
// time out during a pause shorter than DegradeAfter are decided by the
// fallback and do not degrade the limiter; a pause that lasts does, with an
// error that keeps its cause; and the fallback continues from what this
// node admitted through Redis, never from a fresh budget.
//
// The short pause is a SIGSTOP ended by SIGCONT once a call has timed
// out, not a CLIENT PAUSE of 300 ms: when a loaded machine started the
// call late the pause ended first and the test waited forever for a
// timeout.
func TestExactDegradesOnSustainedFailure(t *testing.T) {
	// A Timeout with room for a loaded machine, and a DegradeAfter that
	// leaves seconds between the short pause's end and a trip.
	const timeout = 100 * time.Millisecond
	const degradeAfter = 3 * time.Second
	srv := redistest.StartServer(t)
	ch := newChanges()
	e := newExact(t, newClient(t, srv.Addr), ExactConfig{
		Config:       fixedCfg(5, time.Minute),
		Timeout:      timeout,
		DegradeAfter: degradeAfter,
		// Its checks of the store after a failed call are retried soon;
		// the failure share does not degrade it (decisions by the policy
		// cost nothing, so the loops below make many).
		ProbeInterval: 10 * time.Millisecond, MaxProbeInterval: 100 * time.Millisecond,
		HealthInterval: time.Hour,
		OnStateChange:  ch.record,
	})
	// One instant for "used" here and at the end: the fallback decides at
	// the instant passed, so the test may straddle a minute boundary.
	used := time.Now()
	for range 3 {
		if r := e.AllowN("used", used, 1); !r.Allowed || e.ExactStats().Errors != 0 {
			t.Fatalf("healthy: %+v, stats %+v", r, e.ExactStats())
		}
	}

	// A short pause: a call times out (decided by the fallback, as every
	// call after it until the background goroutine has checked the store
	// again), the pause ends, and calls reach Redis again.
	pid := srv.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := stdsync.OnceFunc(func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(resume)
	shortStart := time.Now()
	for e.ExactStats().Timeouts == 0 {
		if r := e.AllowN("short", time.Now(), 1); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	resume()
	reached := func(st ExactStats) uint64 { return st.Calls - st.Errors }
	for before := reached(e.ExactStats()); reached(e.ExactStats()) == before; {
		e.AllowN("short", time.Now(), 1)
		time.Sleep(time.Millisecond) // polling: the event is the background goroutine's check
	}
	if d := time.Since(shortStart); d >= degradeAfter {
		t.Skipf("the machine took %v for a short pause and its check: not shorter than DegradeAfter %v", d, degradeAfter)
	}
	if st := e.ExactStats(); st.State != Healthy || st.Trips != 0 {
		t.Fatalf("a 300 ms pause degraded the limiter: %+v", st)
	}
	t.Logf("short pause of %v: %+v", time.Since(shortStart), e.ExactStats())

	// A long pause: calls keep timing out for DegradeAfter, and the limiter
	// degrades.
	if _, err := redistest.Do(srv.Addr, "CLIENT", "PAUSE", "60000", "ALL"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for e.State() == Healthy {
		e.AllowN("long", time.Now(), 1)
		time.Sleep(time.Millisecond) // polling: the checks fail in the background
	}
	took := time.Since(start)
	c := ch.wait(t, Degraded, 10*time.Second)
	if !errors.Is(c.Err, ErrUnavailable) || !isTimeout(c.Err) {
		t.Errorf("state change %+v: want ErrUnavailable and a timeout", c)
	}
	if took < degradeAfter {
		t.Errorf("degraded after %v of failures, DegradeAfter %v", took, degradeAfter)
	}
	// "used" had 3 of 5 admitted through Redis: the fallback admits 2.
	got := 0
	for range 5 {
		if e.AllowN("used", used, 1).Allowed {
			got++
		}
	}
	if got != 2 {
		t.Errorf("the fallback admitted %d, want 2 (5 - 3 admitted through Redis)", got)
	}
	t.Logf("long pause: degraded after %v; %+v", took, e.ExactStats())
}

// TestExactFallbackContinuesEveryRate: the local fallback has the same rates and has
// recorded, for each, what Redis admitted: once Redis is gone it
// continues from this process's usage of every rate.
func TestExactFallbackContinuesEveryRate(t *testing.T) {
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	cfg := ratesCfg(shardlimit.FixedWindow, 0, rate(5, time.Minute), rate(8, time.Hour))
	e := newExact(t, newClient(t, p.Addr), ExactConfig{Config: cfg, ProbeInterval: time.Hour, DegradeAfter: time.Nanosecond})
	if fb := e.fallback.Config(); len(fb.Rates) != 2 || fb.Rates[0] != cfg.Rates[0] || fb.Rates[1] != cfg.Rates[1] {
		t.Fatalf("fallback config %+v", fb)
	}
	// Instants on a window boundary of both rates, ahead of the clock (the
	// janitor never finds the key idle): the fallback decides at the
	// instants passed; Redis at its own clock.
	now := time.Now().Truncate(time.Hour).Add(time.Hour)
	for i := range 5 {
		if r := e.AllowN("k", now, 1); !r.Allowed {
			t.Fatalf("healthy call %d denied: %+v", i, r)
		}
	}
	p.SetMode(redistest.Drop)
	for e.State() == Healthy {
		e.AllowN("other", now, 1)
	}
	if r := e.AllowN("k", now, 1); r.Allowed || r.Window != time.Minute || r.RetryAfter != time.Minute {
		t.Fatalf("fallback, minute spent through Redis: %+v", r)
	}
	// A minute later: the hour has 8 - 5 = 3 left.
	got := 0
	for range 5 {
		r := e.AllowN("k", now.Add(time.Minute), 1)
		if r.Allowed {
			got++
		} else if r.Window != time.Hour {
			t.Fatalf("fallback, hour spent: %+v", r)
		}
	}
	if got != 3 {
		t.Fatalf("the fallback admitted %d in the next minute, want 3 (8 - 5 admitted through Redis this hour)", got)
	}
}

// TestExactPoliciesReportTheBindingRate: fail open and fail closed with several rates
// report the binding rate as the in-process limiters do: a fresh key's
// numbers for fail open, no room for fail closed.
func TestExactPoliciesReportTheBindingRate(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	s := time.Second
	cfg := ratesCfg(shardlimit.FixedWindow, 0, rate(10, time.Minute), rate(3, s))
	open := newExact(t, c, ExactConfig{Config: cfg, Policy: FailOpen, Timeout: DefaultTimeout, ProbeInterval: time.Hour})
	for i := range 4 {
		if r := open.AllowN("k", time.Now(), 1); !r.Allowed || r.Remaining != 2 || r.Limit != 3 || r.Window != s {
			t.Fatalf("fail open call %d: %+v", i, r)
		}
	}
	if r := open.AllowN("k", time.Now(), 3); !r.Allowed || r.Remaining != 0 || r.Limit != 3 || r.Window != s {
		t.Fatalf("fail open, n = 3: %+v", r)
	}
	if r := open.AllowN("k", time.Now(), 4); r.Allowed || r.RetryAfter != shardlimit.Never || r.Remaining != 3 || r.Window != s {
		t.Fatalf("fail open, n above one limit: %+v", r)
	}
	closed := newExact(t, c, ExactConfig{Config: cfg, Policy: FailClosed, Timeout: DefaultTimeout, ProbeInterval: 2 * s})
	for i := range 3 {
		if r := closed.AllowN("k", time.Now(), 1); r.Allowed || r.RetryAfter != 2*s || r.Limit != 10 || r.Window != time.Minute {
			t.Fatalf("fail closed call %d: %+v", i, r)
		}
	}
	if r := closed.AllowN("k", time.Now(), 4); r.Allowed || r.RetryAfter != shardlimit.Never {
		t.Fatalf("fail closed, n above one limit: %+v", r)
	}
	if r := closed.AllowN("k", time.Now(), 0); !r.Allowed || r.Window != time.Minute {
		t.Fatalf("fail closed peek: %+v", r)
	}
}

// TestExactFallbackMustHaveTheLimitersWindows: a fallback given must have the limiter's
// windows in the same order (its limits may be stricter).
func TestExactFallbackMustHaveTheLimitersWindows(t *testing.T) {
	c := sharedClient(t)
	s := time.Second
	cfg := ratesCfg(shardlimit.GCRA, 0, rate(10, time.Minute), rate(3, s))
	for name, fcfg := range map[string]shardlimit.Config{
		"one rate":      gcraCfg(3, s),
		"other order":   ratesCfg(shardlimit.GCRA, 0, rate(3, s), rate(10, time.Minute)),
		"other windows": ratesCfg(shardlimit.GCRA, 0, rate(10, time.Hour), rate(3, s)),
		"three":         ratesCfg(shardlimit.GCRA, 0, rate(10, time.Minute), rate(3, s), rate(1, time.Hour)),
	} {
		fb, err := shardlimit.New(fcfg)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := NewExact(c, ExactConfig{Config: cfg, Fallback: fb}); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			if e != nil {
				e.Close()
			}
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
		fb.Close()
	}
	strict := ratesCfg(shardlimit.SlidingLog, 0, rate(5, time.Minute), rate(1, s))
	fb, err := shardlimit.New(strict)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	e := newExact(t, c, ExactConfig{Config: cfg, Fallback: fb})
	if err := e.SetLimits("k", 4, 2); err != nil {
		t.Fatal(err)
	}
	if r := fb.AllowN("k", time.Now(), 3); r.Allowed || r.Limit != 2 {
		t.Fatalf("SetLimits did not reach the fallback: %+v", r)
	}
}

// TestExactRepliesOfSeveralRatesCheckedStrictly: the reply of a two-rate decision is checked
// strictly: its length, every element's type and range, and its
// consistency with the cost and the limits; anything else is ErrBadReply,
// counted and decided by the policy. Well-formed replies are reported by
// the binding rate.
func TestExactRepliesOfSeveralRatesCheckedStrictly(t *testing.T) {
	arr := func(xs ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(xs))
		for _, x := range xs {
			if strings.HasPrefix(x, "$") {
				fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(x)-1, x[1:])
			} else {
				fmt.Fprintf(&b, ":%s\r\n", x)
			}
		}
		return b.String()
	}
	// Limits 3 per second and 5 per 10 seconds; every call costs 1.
	type reply struct {
		resp string
		want shardlimit.Result // zero: a bad reply
	}
	s := time.Second
	replies := []reply{
		{arr("1", "2", "1000000", "0", "4", "10000000", "0", "1", "0", "7", "8"), shardlimit.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: s, Window: s}},
		{arr("0", "0", "500000", "500000", "0", "9000000", "9000000", "1", "0", "7", "8"), shardlimit.Result{Limit: 5, ResetAfter: 9 * s, RetryAfter: 9 * s, Window: 10 * s}},
		{arr("0", "2", "500000", "0", "0", "9000000", "9000000", "1", "0", "7", "8"), shardlimit.Result{Limit: 5, ResetAfter: 9 * s, RetryAfter: 9 * s, Window: 10 * s}},
		{arr("1", "2", "0", "0", "7", "8"), shardlimit.Result{}},                                                 // one rate's shape
		{arr("1", "2", "0", "0", "4", "0", "0", "1", "0", "0", "7", "8"), shardlimit.Result{}},                   // three rates'
		{arr("1", "2", "0", "0", "6", "0", "0", "1", "0", "7", "8"), shardlimit.Result{}},                        // remaining above the limit
		{arr("1", "-1", "0", "0", "4", "0", "0", "1", "0", "7", "8"), shardlimit.Result{}},                       // negative remaining
		{arr("1", "2", "0", "0", "4", "-5", "0", "1", "0", "7", "8"), shardlimit.Result{}},                       // negative reset
		{arr("1", "2", "0", "0", "4", "0", "7", "1", "0", "7", "8"), shardlimit.Result{}},                        // admitted with a wait
		{arr("0", "0", "0", "-1", "0", "0", "5", "1", "0", "7", "8"), shardlimit.Result{}},                       // never, though the cost fits the limit
		{arr("0", "0", "0", "-2", "0", "0", "5", "1", "0", "7", "8"), shardlimit.Result{}},                       // retry below -1
		{arr("2", "2", "0", "0", "4", "0", "0", "1", "0", "7", "8"), shardlimit.Result{}},                        // allowed is not a bit
		{arr("1", "2", "0", "0", "$4", "0", "0", "1", "0", "7", "8"), shardlimit.Result{}},                       // a string
		{arr("1", "2", "0", "0", "4", "0", "9223372036854775807", "1", "0", "7", "8"), shardlimit.Result{}},      // beyond any duration
		{"*11\r\n:1\r\n:2\r\n:0\r\n:0\r\n*1\r\n:4\r\n:0\r\n:0\r\n:1\r\n:0\r\n:7\r\n:8\r\n", shardlimit.Result{}}, // a nested array
		{arr("1", "2", "0", "0", "4", "0", "0", "-1", "0", "7", "8"), shardlimit.Result{}},                       // a negative instant
		{arr("1", "2", "0", "0", "4", "0", "0", "1", "-1", "7", "8"), shardlimit.Result{}},                       // a negative reset marker
		{arr("1", "2", "0", "0", "4", "0", "0", "1", "7", "8"), shardlimit.Result{}},                             // no reset marker
		{arr("1", "2", "0", "0", "4", "0", "0", "1", "0", "7", "-8"), shardlimit.Result{}},                       // a negative birth
		{arr("1", "2", "0", "0", "4", "0", "0", "1", "0", "7"), shardlimit.Result{}},                             // one birth for two rates
		{"-ERR shardlimit: key x holds corrupt state\r\n", shardlimit.Result{}},                                  // an error reply (not ErrBadReply)
	}
	var next atomic.Int64
	f := redistest.StartFake(t, func(args []string) []byte {
		switch strings.ToUpper(args[0]) {
		case "EVALSHA", "EVAL":
			return []byte(replies[int(next.Add(1)-1)%len(replies)].resp)
		}
		return nil
	})
	cfg := ratesCfg(shardlimit.FixedWindow, 0, rate(3, s), rate(5, 10*s))
	e := newExact(t, newClient(t, f.Addr), ExactConfig{Config: cfg, EvictionCheck: -1})
	now := time.Now()
	bad, policy := uint64(0), uint64(0)
	for i, rp := range replies {
		r := e.AllowN(fmt.Sprintf("k%d", i), now, 1)
		st := e.ExactStats()
		if rp.want != (shardlimit.Result{}) {
			if r != rp.want || st.PolicyDecisions != policy {
				t.Fatalf("reply %d: %+v, want %+v (stats %+v)", i, r, rp.want, st)
			}
			continue
		}
		policy++
		if !strings.HasPrefix(rp.resp, "-") {
			bad++
			if !errors.Is(st.LastError, ErrBadReply) {
				t.Errorf("reply %d: LastError %v, want ErrBadReply", i, st.LastError)
			}
		}
		// The fallback's decision of a fresh key.
		if !r.Allowed || r.Err != nil || st.PolicyDecisions != policy || st.BadReplies != bad || st.State != Healthy {
			t.Fatalf("reply %d %q: %+v, stats %+v; want the fallback's decision", i, rp.resp, r, st)
		}
	}
}
