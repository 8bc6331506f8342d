package mwtest

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwengine"
)

// The cases of rules with several limits ("limits": shardlimit's
// Config.Rates), end to end.

// ratesRule returns rules with one catch-all rule "r" of the algorithm
// named alg and the limits given as JSON list members.
func ratesRule(t *testing.T, alg, limits string) *httplimit.Rules {
	t.Helper()
	return MustRules(t, fmt.Sprintf(`{"rules": [{"name": "r", "algorithm": %q, "limits": [%s]}]}`, alg, limits))
}

// RatesDenialConsumesNothing checks, through the X-RateLimit fields, that
// a request one limit denies counts against no other: 3 a second and 5 a
// minute, the second's denials leave the minute's count as it was
// (fixed window and sliding log); 2 a second and 3 a minute, the minute's
// denials leave the second's count as it was (sliding log, where the
// minute frees units before a second without them has passed).
func RatesDenialConsumesNothing(t *testing.T, h Harness) {
	for _, alg := range []string{"fixed_window", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			clock := NewClock()
			tg := h.Start(t, Setup{Options: httplimit.Options{
				Rules:   ratesRule(t, alg, `{"limit": 5, "window": "1m"}, {"limit": 3, "window": "1s"}`),
				Keys:    httplimit.KeyConfig{TrustedProxies: Loopback},
				Headers: httplimit.HeaderConfig{IETF: true},
				Clock:   clock,
			}})
			c := NewClient(t, tg.URL, 1)
			get := func() Resp { return c.Get("/", XFF("192.0.2.40")...) }
			for i := range 3 {
				Check(t, fmt.Sprintf("t=0 #%d", i+1), get(), 200, H{XLimit: "3", XRemaining: strconv.Itoa(2 - i),
					RL: fmt.Sprintf(`"r-1s";r=%d;t=1`, 2-i)})
			}
			for i := range 3 {
				Check(t, fmt.Sprintf("t=0 denied #%d", i+1), get(), 429, H{XLimit: "3", XRemaining: "0", RetryAfter: "1"})
			}
			clock.At(Sec(1))
			// Had the denials counted in the minute, it would be full.
			Check(t, "t=1 #1: the minute binds, 1 left", get(), 200, H{XLimit: "5", XRemaining: "1", XReset: "59",
				RL: `"r-1m";r=1;t=59`, RLPolicy: `"r-1s";q=3;w=1, "r-1m";q=5;w=60`})
			Check(t, "t=1 #2", get(), 200, H{XLimit: "5", XRemaining: "0"})
			Check(t, "t=1 #3: the minute denies", get(), 429, H{XLimit: "5", XRemaining: "0", RetryAfter: "59"})
		})
	}
	t.Run("sliding_log minute denials", func(t *testing.T) {
		clock := NewClock()
		tg := h.Start(t, Setup{Options: httplimit.Options{
			Rules: ratesRule(t, "sliding_log", `{"limit": 2, "window": "1s"}, {"limit": 3, "window": "1m"}`),
			Keys:  httplimit.KeyConfig{TrustedProxies: Loopback},
			Clock: clock,
		}})
		c := NewClient(t, tg.URL, 1)
		get := func() Resp { return c.Get("/", XFF("192.0.2.41")...) }
		Check(t, "t=0 #1", get(), 200, H{XLimit: "2", XRemaining: "1"})
		Check(t, "t=0 #2", get(), 200, H{XLimit: "2", XRemaining: "0"})
		clock.At(Sec(1))
		Check(t, "t=1", get(), 200, H{XLimit: "3", XRemaining: "0"})
		clock.At(Sec(59.5))
		for i := range 2 {
			Check(t, fmt.Sprintf("t=59.5 #%d: the minute denies", i+1), get(), 429, H{XLimit: "3", RetryAfter: "1"})
		}
		// At t=60 the two units of t=0 leave the minute. Had the denials
		// at 59.5 counted in the second, it would be full.
		clock.At(Sec(60))
		Check(t, "t=60 #1", get(), 200, H{XLimit: "3", XRemaining: "1"})
		Check(t, "t=60 #2", get(), 200, H{XLimit: "3", XRemaining: "0"})
	})
}

// RatesRetryAfter checks that a denial's wait is the first instant at
// which every limit admits the request, by asking again exactly then (and
// a nanosecond sooner) on the injected clock, with the exact wait the
// OnDenied hook reports and the Retry-After it rounds up to: "r" allows 2
// a second and 3 in 10 s, "both" 2 a second and 2 in 10 s, so that its
// denials are the second's and the 10 s window's at once and the wait is
// the longer one's, not the second's.
func RatesRetryAfter(t *testing.T, h Harness) {
	for _, ac := range []retryAfterCase{
		{"fixed_window", 250 * time.Millisecond, 9 * time.Second, 9500 * time.Millisecond},
		{"sliding_log", 500 * time.Millisecond, 9 * time.Second, 10 * time.Second},
	} {
		t.Run(ac.alg, func(t *testing.T) { ratesRetryAfter(t, h, ac) })
	}
}

// retryAfterCase is RatesRetryAfter's case of one algorithm.
type retryAfterCase struct {
	alg           string
	first, second time.Duration // the exact waits of /r's denials
	both          time.Duration // of /both's
}

// ratesRetryAfter is RatesRetryAfter under one algorithm.
func ratesRetryAfter(t *testing.T, h Harness, ac retryAfterCase) {
	clock := NewClock()
	var denied deniedLog
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules: MustRules(t, fmt.Sprintf(`{"rules": [
			{"name": "r", "path": "/r", "algorithm": %[1]q, "limits": [{"limit": 2, "window": "1s"}, {"limit": 3, "window": "10s"}]},
			{"name": "both", "path": "/both", "algorithm": %[1]q, "limits": [{"limit": 2, "window": "1s"}, {"limit": 2, "window": "10s"}]}
		]}`, ac.alg)),
		Headers:  httplimit.HeaderConfig{IETF: true},
		Clock:    clock,
		OnDenied: denied.add,
	}})
	c := NewClient(t, tg.URL, 1)
	now := T0
	at := func(tm time.Time) { now = tm; clock.Set(tm) }
	// deny asks path at now, expects a denial with the exact wait
	// want, and asks again a nanosecond before it ends (denied) and
	// as it ends (admitted).
	deny := func(step, path string, want time.Duration) {
		t.Helper()
		r := c.Get(path)
		d := denied.last(t)
		ra, _ := mwengine.RetryAfterSeconds(want)
		Check(t, step, r, 429, H{RetryAfter: strconv.FormatInt(ra, 10)})
		if d.Result.RetryAfter != want {
			t.Fatalf("%s: exact wait %v, want %v", step, d.Result.RetryAfter, want)
		}
		end := now.Add(want)
		at(end.Add(-time.Nanosecond))
		Check(t, step+", a nanosecond before the wait ends", c.Get(path), 429, nil)
		at(end)
		Check(t, step+", as the wait ends", c.Get(path), 200, nil)
	}
	at(T0.Add(Sec(0.25)))
	Check(t, "/r t=0.25", c.Get("/r"), 200, H{XRemaining: "1"})
	at(T0.Add(Sec(0.5)))
	Check(t, "/r t=0.5", c.Get("/r"), 200, H{XRemaining: "0", XLimit: "2"})
	at(T0.Add(Sec(0.75)))
	deny("/r t=0.75: the second denies", "/r", ac.first)
	// The 10 s window is full now; the second has room.
	deny("/r: the 10 s window denies", "/r", ac.second)

	at(T0.Add(Sec(20.5)))
	Check(t, "/both #1", c.Get("/both"), 200, nil)
	Check(t, "/both #2", c.Get("/both"), 200, H{XLimit: "2", XRemaining: "0", RL: `"both-10s";r=0;t=10`})
	r := c.Get("/both")
	ra, _ := mwengine.RetryAfterSeconds(ac.both)
	Check(t, "/both #3: both deny", r, 429, H{XLimit: "2", RetryAfter: strconv.FormatInt(ra, 10)})
	if got := denied.last(t).Result.RetryAfter; got != ac.both {
		t.Fatalf("/both #3: exact wait %v, want %v (the 10 s window's)", got, ac.both)
	}
	at(T0.Add(Sec(21.5)))
	deny("/both when the second alone would admit", "/both", ac.both-time.Second)
}

// RatesHeaders checks the fields of a rule of several limits: the
// X-RateLimit trio and X-RateLimit-Window-Ms of the binding limit (the
// least remaining; of two with as much, the longer window), a
// RateLimit-Policy item per limit, shortest window first, named by the
// rules (a limit's own name, or the rule's policy, HeaderConfig.PolicyName
// or the rule's name, followed by the window) with the client's own
// limits, and a RateLimit item for the binding one; ParseIETF checks both
// as structured fields.
func RatesHeaders(t *testing.T, h Harness) {
	clock := NewClock()
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules: MustRules(t, `{"rules": [
			{"name": "m", "path": "/m", "algorithm": "fixed_window", "limits": [
				{"limit": 10, "window": "1m", "policy": "per-minute"}, {"limit": 3, "window": "1s"}]},
			{"name": "p", "path": "/p", "algorithm": "sliding_log", "policy": "baz", "limits": [
				{"limit": 5, "window": "1m"}, {"limit": 2, "window": "1s"}]}
		], "overrides": [{"rule": "m", "id": "gold", "limits": [{"limit": 50, "window": "1m"}]}]}`),
		Keys:    httplimit.KeyConfig{Header: "X-Client-ID", TrustedProxies: Loopback},
		Headers: httplimit.HeaderConfig{IETF: true, Verbose: true, PolicyName: "api"},
		Clock:   clock,
	}})
	c := NewClient(t, tg.URL, 1)
	mPolicy := `"api-1s";q=3;w=1, "per-minute";q=10;w=60`
	clock.At(Sec(50))
	r := c.Get("/m")
	Check(t, "/m #1", r, 200, H{XLimit: "3", XRemaining: "2", XReset: "1", XWindowMs: "1000", XStrategy: "fixed_window",
		RLPolicy: mPolicy, RL: `"api-1s";r=2;t=1`})
	pols, svcs, err := ParseIETF(r.Header)
	if err != nil || !reflect.DeepEqual(pols, []Policy{{"api-1s", 3, 1}, {"per-minute", 10, 60}}) ||
		!reflect.DeepEqual(svcs, []Service{{"api-1s", 2, 1}}) {
		t.Errorf("/m #1: parsed %+v and %+v, %v", pols, svcs, err)
	}
	for i := range 2 {
		c.Get("/m")
		clock.At(Sec(float64(51 + i)))
		c.Get("/m")
		c.Get("/m")
	}
	// 7 used in the minute: 3 left there, 3 in the fresh second.
	clock.At(Sec(53))
	Check(t, "/m: as many left in both, the minute binds", c.Get("/m"), 200, H{XLimit: "10", XRemaining: "2",
		XReset: "7", XWindowMs: "60000", RLPolicy: mPolicy, RL: `"per-minute";r=2;t=7`})
	Check(t, "/m: the minute binds", c.Get("/m"), 200, H{XLimit: "10", XRemaining: "1", RL: `"per-minute";r=1;t=7`})

	gold := []string{"X-Client-ID", "gold"}
	Check(t, "gold /m", c.Get("/m", gold...), 200, H{XLimit: "3", XRemaining: "2",
		RLPolicy: `"api-1s";q=3;w=1, "per-minute";q=50;w=60`, RL: `"api-1s";r=2;t=1`})

	Check(t, "/p #1", c.Get("/p"), 200, H{XLimit: "2", XRemaining: "1", XWindowMs: "1000", XStrategy: "sliding_log",
		RLPolicy: `"baz-1s";q=2;w=1, "baz-1m";q=5;w=60`, RL: `"baz-1s";r=1;t=1`})
}

// RatesReload checks reloads of a rule of several limits over the
// network: new numbers keep every client's counts and apply at once; a
// changed window starts the rule afresh.
func RatesReload(t *testing.T, h Harness) {
	clock := NewClock()
	tg := h.Start(t, Setup{Options: httplimit.Options{
		Rules: ratesRule(t, "fixed_window", `{"limit": 3, "window": "1s"}, {"limit": 5, "window": "1m"}`),
		Clock: clock,
	}})
	c := NewClient(t, tg.URL, 1)
	for i := range 3 {
		Check(t, fmt.Sprintf("t=0 #%d", i+1), c.Get("/"), 200, H{XLimit: "3", XRemaining: strconv.Itoa(2 - i)})
	}
	clock.At(Sec(1))
	Check(t, "t=1", c.Get("/"), 200, H{XLimit: "5", XRemaining: "1"})
	if err := tg.Reload(ratesRule(t, "fixed_window", `{"limit": 6, "window": "1m"}, {"limit": 2, "window": "1s"}`)); err != nil {
		t.Fatal(err)
	}
	Check(t, "new numbers: 1 used of 2 in the second", c.Get("/"), 200, H{XLimit: "2", XRemaining: "0"})
	Check(t, "new numbers: the second is full", c.Get("/"), 429, H{XLimit: "2", XRemaining: "0", RetryAfter: "1"})
	clock.At(Sec(2))
	Check(t, "new numbers: 5 used of 6 in the minute", c.Get("/"), 200, H{XLimit: "6", XRemaining: "0"})
	if err := tg.Reload(ratesRule(t, "fixed_window", `{"limit": 6, "window": "1h"}, {"limit": 2, "window": "1s"}`)); err != nil {
		t.Fatal(err)
	}
	Check(t, "an hour for the minute: fresh", c.Get("/"), 200, H{XLimit: "2", XRemaining: "1"})
}
