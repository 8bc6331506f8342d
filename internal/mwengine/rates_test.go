package mwengine

import (
	"reflect"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestSeveralRates checks a rule of several limits through the engine: the
// limiter's rates (shortest window first, whatever the rule's order), the
// binding rate in the Result, the Decision's window and every field, with
// overrides per window (RateLimit-Policy gives the key's own limit in
// every window, not only the binding one's) and a block on every rule.
func TestSeveralRates(t *testing.T) {
	e := newTestEngine(t, httplimit.Options{
		Clock: shardlimit.NewManualClock(t0),
		Rules: mustParse(t, `{"rules": [
			{"name": "m", "path": "/m", "limits": [{"limit": 10, "window": "1m"}, {"limit": 3, "window": "1s"}]}
		], "overrides": [
			{"rule": "m", "ip": "192.0.2.9", "limits": [{"limit": 50, "window": "1m"}]},
			{"ip": "192.0.2.66", "limit": 0}
		]}`),
		Headers: httplimit.HeaderConfig{IETF: true, Verbose: true},
	})
	r := e.set.Load().rules["m"]
	want := []shardlimit.Rate{{Limit: 3, Window: time.Second}, {Limit: 10, Window: time.Minute}}
	if got := r.l.lim.Config().Rates; !reflect.DeepEqual(got, want) {
		t.Fatalf("limiter rates %v, want %v", got, want)
	}
	type row struct {
		ip        string
		at        time.Duration
		action    httplimit.Action
		window    time.Duration
		fields    map[string]string
		remaining int
	}
	policy := `"m-1s";q=3;w=1, "m-1m";q=10;w=60`
	for i, rw := range []row{
		{"192.0.2.1", 0, httplimit.ActionAllow, time.Second, map[string]string{
			"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "2", "X-Ratelimit-Reset": "1",
			"Ratelimit-Policy": policy, "Ratelimit": `"m-1s";r=2;t=1`, "X-Ratelimit-Window-Ms": "1000"}, 2},
		{"192.0.2.1", 0, httplimit.ActionAllow, time.Second, nil, 1},
		{"192.0.2.1", 0, httplimit.ActionAllow, time.Second, nil, 0},
		{"192.0.2.1", 0, httplimit.ActionDeny, time.Second, map[string]string{
			"X-Ratelimit-Limit": "3", "Ratelimit": `"m-1s";r=0;t=1`, "Retry-After": "1"}, 0},
		// The denial consumed nothing in the minute: 7 left there.
		{"192.0.2.1", time.Second, httplimit.ActionAllow, time.Second, map[string]string{"Ratelimit": `"m-1s";r=2;t=1`}, 2},
		{"192.0.2.1", 3 * time.Second, httplimit.ActionAllow, time.Second, nil, 2},
		{"192.0.2.1", 3 * time.Second, httplimit.ActionAllow, time.Second, nil, 1},
		{"192.0.2.1", 3 * time.Second, httplimit.ActionAllow, time.Second, nil, 0},
		// As many left in both (2, then 1, then 0): the longer window binds.
		{"192.0.2.1", 4 * time.Second, httplimit.ActionAllow, time.Minute, map[string]string{
			"X-Ratelimit-Limit": "10", "Ratelimit": `"m-1m";r=2;t=56`}, 2},
		{"192.0.2.1", 4 * time.Second, httplimit.ActionAllow, time.Minute, nil, 1},
		{"192.0.2.1", 4 * time.Second, httplimit.ActionAllow, time.Minute, map[string]string{
			"X-Ratelimit-Limit": "10", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "56",
			"Ratelimit-Policy": policy, "Ratelimit": `"m-1m";r=0;t=56`, "X-Ratelimit-Window-Ms": "60000"}, 0},
		// The minute denies, the second would admit: the minute binds, and
		// its wait is the Retry-After.
		{"192.0.2.1", 5 * time.Second, httplimit.ActionDeny, time.Minute, map[string]string{
			"X-Ratelimit-Limit": "10", "Ratelimit": `"m-1m";r=0;t=55`, "Retry-After": "55"}, 0},
		// The override: 50 a minute, the rule's 3 a second.
		{"192.0.2.9", 0, httplimit.ActionAllow, time.Second, map[string]string{
			"X-Ratelimit-Limit": "3", "Ratelimit-Policy": `"m-1s";q=3;w=1, "m-1m";q=50;w=60`}, 2},
		// Blocked on every rule: 0 in both windows, the longer binding.
		{"192.0.2.66", 0, httplimit.ActionDeny, time.Minute, map[string]string{
			"X-Ratelimit-Limit": "0", "Ratelimit-Policy": `"m-1s";q=0;w=1, "m-1m";q=0;w=60`,
			"Ratelimit": `"m-1m";r=0;t=60`, "Retry-After": ""}, 0},
	} {
		d := decide(e, rw.ip, "", "/m", rw.at, 1)
		if d.Action != rw.action || d.Window != rw.window || d.Result.Window != rw.window || d.Result.Remaining != rw.remaining {
			t.Errorf("row %d: %v, window %v (Result %v), remaining %d; want %v, %v, %d",
				i, d.Action, d.Window, d.Result.Window, d.Result.Remaining, rw.action, rw.window, rw.remaining)
		}
		h := format(t, e, &d)
		for k, v := range rw.fields {
			if got, ok := h[k]; v == "" && ok || v != "" && h.Get(k) != v {
				t.Errorf("row %d: %s = %q, want %q", i, k, got, v)
			}
		}
	}
	// A request decided by nothing (a negative cost) names the longest
	// window.
	if d := decide(e, "192.0.2.2", "", "/m", 0, -1); d.Action != httplimit.ActionBadCost || d.Window != time.Minute {
		t.Errorf("bad cost: %v, window %v", d.Action, d.Window)
	}
}

// TestReloadSeveralRates checks which reloads keep a rule's limiter of
// several rates: new numbers or a new order keep it, and its counters,
// and apply at once; a window added, removed or changed gives the rule a
// fresh limiter, and going back to the old windows gets the old one back.
func TestReloadSeveralRates(t *testing.T) {
	rules := func(limits, overrides string) *httplimit.Rules {
		return mustParse(t, `{"rules": [{"name": "m", "path": "/m", "limits": [`+limits+`]}], "overrides": [`+overrides+`]}`)
	}
	// The clock stays at t0, so no reload finds a limiter set aside idle.
	e := newTestEngine(t, httplimit.Options{Rules: rules(`{"limit": 3, "window": "1s"}, {"limit": 10, "window": "1m"}`, ``),
		Clock: shardlimit.NewManualClock(t0)})
	lim := func() shardlimit.Limiter { return e.set.Load().rules["m"].l.lim }
	check := func(step, ip string, at time.Duration, action httplimit.Action, limit, remaining int) {
		t.Helper()
		d := decide(e, ip, "", "/m", at, 1)
		if d.Action != action || d.Result.Limit != limit || d.Result.Remaining != remaining {
			t.Errorf("%s: %v, limit %d, remaining %d; want %v, %d, %d", step, d.Action, d.Result.Limit, d.Result.Remaining, action, limit, remaining)
		}
	}
	reload := func(r *httplimit.Rules) {
		t.Helper()
		if err := e.Reload(r); err != nil {
			t.Fatal(err)
		}
	}
	first := lim()
	for i := range 3 {
		check("t=0", "192.0.2.1", 0, httplimit.ActionAllow, 3, 2-i)
	}
	check("t=1", "192.0.2.1", time.Second, httplimit.ActionAllow, 3, 2) // 4 used in the minute

	// Other numbers, another order, an override per window: same limiter.
	reload(rules(`{"limit": 5, "window": "1m"}, {"limit": 2, "window": "1s"}`, `{"rule": "m", "ip": "192.0.2.9", "limits": [{"limit": 1, "window": "1s"}]}`))
	if lim() != first {
		t.Fatal("new limits on the same windows built a new limiter")
	}
	check("lowered: the minute binds, 4 used of 5", "192.0.2.1", time.Second, httplimit.ActionAllow, 5, 0)
	check("lowered: full", "192.0.2.1", time.Second, httplimit.ActionDeny, 5, 0)
	check("override 1/s", "192.0.2.9", time.Second, httplimit.ActionAllow, 1, 0)
	check("override 1/s, full", "192.0.2.9", time.Second, httplimit.ActionDeny, 1, 0)
	if got := lim().Config().Rates; !reflect.DeepEqual(got, []shardlimit.Rate{{Limit: 2, Window: time.Second}, {Limit: 5, Window: time.Minute}}) {
		t.Errorf("limiter rates after the reload: %v", got)
	}

	// Another window: a new limiter, fresh counters.
	reload(rules(`{"limit": 2, "window": "1s"}, {"limit": 5, "window": "1h"}`, ``))
	if lim() == first {
		t.Fatal("a changed window kept the limiter")
	}
	check("1h instead of 1m: fresh", "192.0.2.1", 2*time.Second, httplimit.ActionAllow, 2, 1)
	// One window: a new limiter of one rate.
	reload(rules(`{"limit": 5, "window": "1m"}`, ``))
	if lim() == first || len(lim().Config().Rates) != 0 || lim().Config().Limit != 5 {
		t.Fatalf("one window: limiter config %+v", lim().Config())
	}
	check("1m alone: fresh", "192.0.2.1", 2*time.Second, httplimit.ActionAllow, 5, 4)
	// The first windows again: the first limiter and its counters.
	reload(rules(`{"limit": 2, "window": "1s"}, {"limit": 6, "window": "1m"}`, ``))
	if lim() != first {
		t.Fatal("the first windows came back without their limiter")
	}
	check("back: 5 used of 6", "192.0.2.1", 3*time.Second, httplimit.ActionAllow, 6, 0)
}
