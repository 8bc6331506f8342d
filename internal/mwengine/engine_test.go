package mwengine

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

var t0 = time.Unix(1_734_480_000, 0)

// decide runs one request for client ip (or identity id) on path at t0+at.
func decide(e *Engine, ip, id, path string, at time.Duration, cost int) Outcome {
	sc := e.GetScratch()
	defer e.PutScratch(sc)
	var client netip.Addr
	if ip != "" {
		client = netip.MustParseAddr(ip)
	}
	var d Outcome
	Decide(e, sc, &Request[string]{Method: "GET", Path: path, Identity: id, Client: client, Now: t0.Add(at), Cost: cost}, &d)
	return d
}

// TestReloadRefused checks that an invalid rule set, or none, is refused
// and changes nothing.
func TestReloadRefused(t *testing.T) {
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, `{"rules": [{"name": "a", "path": "/a", "limit": 3, "window": "1m"}]}`)})
	old := e.set.Load()
	bad := mustParse(t, `{"rules": [{"name": "a", "path": "/a", "limit": 3, "window": "1m", "algorithm": "sliding_counter", "buckets": 7}]}`)
	if err := e.Reload(bad); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Fatalf("Reload with 1m/7 buckets: %v", err)
	}
	if e.set.Load() != old {
		t.Fatal("a refused Reload changed the rules")
	}
	if err := e.Reload(nil); err == nil {
		t.Fatal("Reload(nil) accepted")
	}
}

// TestReloadSemantics checks the limits of rules and overrides before and
// after a reload, and which rules keep their limiters: those whose
// algorithm, windows and buckets are unchanged.
func TestReloadSemantics(t *testing.T) {
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, `{"rules": [
		{"name": "a", "path": "/a", "limit": 3, "window": "1m"},
		{"name": "b", "path": "/b", "algorithm": "sliding_log", "limit": 3, "window": "1m"},
		{"name": "c", "path": "/c", "algorithm": "sliding_counter", "limit": 3, "window": "1m"}
	], "overrides": [
		{"rule": "a", "ip": "192.0.2.7", "limit": 1},
		{"ip": "192.0.2.8", "limit": 2},
		{"rule": "a", "ip": "192.0.2.8", "limit": 0}
	]}`)})
	old := e.set.Load()
	for _, tc := range []struct {
		ip, path string
		limit    int
	}{
		{"192.0.2.1", "/a", 3}, {"192.0.2.7", "/a", 1}, {"192.0.2.7", "/b", 3},
		{"192.0.2.8", "/a", 0}, {"192.0.2.8", "/b", 2}, {"192.0.2.8", "/c", 2},
	} {
		if d := decide(e, tc.ip, "", tc.path, 0, 1); d.Result.Limit != tc.limit {
			t.Errorf("%s %s: limit %d, want %d", tc.ip, tc.path, d.Result.Limit, tc.limit)
		}
	}

	err := e.Reload(mustParse(t, `{"rules": [
		{"name": "a", "path": "/a", "limit": 4, "window": "1m"},
		{"name": "b", "path": "/b", "algorithm": "fixed_window", "limit": 3, "window": "1m"},
		{"name": "c", "path": "/c", "algorithm": "sliding_counter", "limit": 3, "window": "1m", "buckets": 10}
	], "overrides": [
		{"rule": "a", "ip": "192.0.2.7", "limit": 5}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	ns := e.set.Load()
	if ns.rules["a"].l != old.rules["a"].l || ns.rules["c"].l != old.rules["c"].l {
		t.Error("unchanged rules got new limiters (default buckets 10 == explicit 10)")
	}
	if ns.rules["b"].l == old.rules["b"].l {
		t.Error("a rule whose algorithm changed kept its limiter")
	}
	if r := old.rules["b"].l.lim.AllowN("x", t0, 1); !errors.Is(r.Err, shardlimit.ErrClosed) {
		t.Errorf("the replaced limiter is not closed: %+v", r)
	}
	for _, tc := range []struct {
		ip, path  string
		limit     int
		remaining int
	}{
		{"192.0.2.1", "/a", 4, 2},  // kept its use; raised default
		{"192.0.2.7", "/a", 5, 3},  // override changed 1 -> 5, one used
		{"192.0.2.8", "/a", 4, 3},  // override removed: default again
		{"192.0.2.8", "/c", 3, 1},  // every-rule override removed
		{"192.0.2.8", "/b", 3, 2},  // fresh limiter
		{"192.0.2.7", "/b", 3, 2},  // fresh limiter
		{"192.0.2.1", "/zz", 0, 0}, // no rule
	} {
		d := decide(e, tc.ip, "", tc.path, time.Second, 1)
		if d.Result.Limit != tc.limit || d.Result.Remaining != tc.remaining {
			t.Errorf("%s %s after reload: limit %d remaining %d, want %d and %d",
				tc.ip, tc.path, d.Result.Limit, d.Result.Remaining, tc.limit, tc.remaining)
		}
	}
}

// TestDecideActions checks the action of each kind of request: a bad
// cost, within the limit, over it (seen by OnDenied), without a usable
// address (the shared bucket), and after Close.
func TestDecideActions(t *testing.T) {
	var denied []httplimit.Decision
	e := newTestEngine(t, httplimit.Options{
		Rules:    mustParse(t, `{"rules": [{"name": "r", "limit": 1, "window": "1m"}]}`),
		OnDenied: func(d httplimit.Decision) { denied = append(denied, d) },
	})
	if d := decide(e, "192.0.2.1", "", "/", 0, -1); d.Action != httplimit.ActionBadCost || d.Rule != "r" {
		t.Errorf("cost -1: %+v", d)
	}
	if d := decide(e, "192.0.2.1", "", "/", 0, 0); d.Action != httplimit.ActionAllow || d.Result.Remaining != 1 {
		t.Errorf("cost 0: %+v", d)
	}
	if d := decide(e, "192.0.2.1", "", "/", 0, 1); d.Action != httplimit.ActionAllow || d.Result.Remaining != 0 {
		t.Errorf("cost 1: %+v", d)
	}
	d := decide(e, "192.0.2.1", "", "/", 0, 1)
	if d.Action != httplimit.ActionDeny || d.Result.RetryAfter != time.Minute || d.Time != t0 {
		t.Errorf("over the limit: %+v", d)
	}
	if len(denied) != 1 || denied[0].Rule != "r" || denied[0].Action != httplimit.ActionDeny {
		t.Errorf("OnDenied saw %+v", denied)
	}
	if d := decide(e, "", "", "/", 0, 1); d.Action != httplimit.ActionAllow {
		t.Errorf("no address: %+v (the shared bucket)", d)
	}
	if d := decide(e, "0.0.0.0", "", "/", 0, 1); d.Action != httplimit.ActionDeny {
		t.Errorf("unspecified address: %+v (the shared bucket, now full)", d)
	}
	checkClosedEngine(t, e)
}

// checkClosedEngine closes e, which has decided one request of a bad cost
// and no other error, twice; then it fails closed and refuses Reload.
func checkClosedEngine(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if d := decide(e, "192.0.2.1", "", "/", 0, 1); d.Action != httplimit.ActionFailClosed || !errors.Is(d.Result.Err, shardlimit.ErrClosed) {
		t.Errorf("after Close: %+v", d)
	}
	if err := e.Reload(mustParse(t, `{"limiting": "off"}`)); !errors.Is(err, shardlimit.ErrClosed) {
		t.Errorf("Reload after Close: %v", err)
	}
	if st := e.Stats(); st.Errors != 1 || st.BadCost != 1 || st.Rules != 0 {
		t.Errorf("Stats %+v", st)
	}
}

func TestEmptyKeyRejectOnlyOnLimitedRoutes(t *testing.T) {
	e := newTestEngine(t, httplimit.Options{
		Rules: mustParse(t, `{"rules": [{"name": "a", "path": "/a", "limit": 1, "window": "1m"}]}`),
		Keys:  httplimit.KeyConfig{Header: "X-Api-Key", EmptyKey: httplimit.EmptyKeyReject, UnknownIdentity: httplimit.UnknownIdentityOwnKey},
	})
	if d := decide(e, "192.0.2.1", "", "/b", 0, 1); d.Action != httplimit.ActionNoRule {
		t.Errorf("unlimited route without identity: %v", d.Action)
	}
	if d := decide(e, "192.0.2.1", "", "/a", 0, 1); d.Action != httplimit.ActionNoIdentity {
		t.Errorf("limited route without identity: %v", d.Action)
	}
	if d := decide(e, "192.0.2.1", "k", "/a", 0, 1); d.Action != httplimit.ActionAllow {
		t.Errorf("limited route with identity: %v", d.Action)
	}
}

func TestOptionsErrors(t *testing.T) {
	rules := mustParse(t, `{"rules": [{"name": "r", "limit": 1, "window": "1m"}]}`)
	for i, o := range []httplimit.Options{
		{},
		{Rules: rules, Headers: httplimit.HeaderConfig{PolicyName: "caf\u00e9"}},
		{Rules: rules, DefaultAlgorithm: 9},
		{Rules: rules, OnError: 7},
		{Rules: rules, Keys: httplimit.KeyConfig{IPv6Prefix: 200}},
		{Rules: rules, Limiter: shardlimit.Config{Shards: 3}},
		{Rules: mustParse(t, `{"rules": [{"name": "r", "limit": 20000000, "window": "1m"}]}`), DefaultAlgorithm: shardlimit.SlidingLog},
	} {
		if e, err := New(o, false); !errors.Is(err, shardlimit.ErrInvalidConfig) {
			t.Errorf("options #%d: %v", i, err)
			if e != nil {
				e.Close()
			}
		}
	}
}

// TestReloadUnderLoad decides from several goroutines while rules are
// reloaded, replacing, setting aside and closing limiters: no decision may
// fail (a limiter is closed only once no decision can reach it), and the
// race detector must stay quiet.
func TestReloadUnderLoad(t *testing.T) {
	rules := func(i int) *httplimit.Rules {
		alg := []string{"fixed_window", "sliding_log", "sliding_counter", "gcra"}[i%4]
		return mustParse(t, fmt.Sprintf(`{"rules": [
			{"name": "hot", "algorithm": %q, "limit": %d, "window": "1m"},
			{"name": "r%d", "path": "/x", "limit": 5, "window": "1m"}
		], "overrides": [{"ip": "192.0.2.%d", "limit": 3}]}`, alg, 100+i, i, i%200))
	}
	e := newTestEngine(t, httplimit.Options{Rules: rules(0)})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan Outcome, 1)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := "/"
				if i%2 == 0 {
					path = "/x"
				}
				d := decide(e, fmt.Sprintf("192.0.2.%d", (g*31+i)%250), "", path, time.Duration(i)*time.Millisecond, 1)
				if d.Action == httplimit.ActionFailClosed {
					select {
					case errs <- d:
					default:
					}
				}
			}
		}()
	}
	for i := 1; i <= 200; i++ {
		if err := e.Reload(rules(i)); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	select {
	case d := <-errs:
		t.Errorf("a decision failed during reloads: %+v", d.Result)
	default:
	}
}

// TestUnknownIdentityFollowsReload checks that which identities are keys
// follows the rules in force: an identity a Reload lists (in a tier or an
// override) becomes its own key, one a Reload drops is keyed by address
// again, and an unlisted one never is (httplimit.UnknownIdentityAnonymous).
func TestUnknownIdentityFollowsReload(t *testing.T) {
	e := newTestEngine(t, httplimit.Options{
		Rules: mustParse(t, `{"rules": [{"name": "r", "limit": 3, "window": "1m"}],
			"overrides": [{"rule": "r", "id": "k9", "limit": 5}]}`),
		Keys: httplimit.KeyConfig{Header: "X-Api-Key"},
	})
	type want struct {
		limit, remaining int
		tier             string
	}
	check := func(step, ip, id string, w want) {
		t.Helper()
		d := decide(e, ip, id, "/", 0, 1)
		if d.Action != httplimit.ActionAllow || d.Result.Limit != w.limit || d.Result.Remaining != w.remaining || d.Tier != w.tier {
			t.Errorf("%s: action %v, limit %d, remaining %d, tier %q; want allowed, %d, %d, %q",
				step, d.Action, d.Result.Limit, d.Result.Remaining, d.Tier, w.limit, w.remaining, w.tier)
		}
	}
	check("k1 unlisted", "192.0.2.1", "k1", want{3, 2, ""})
	check("k2 unlisted, same address", "192.0.2.1", "k2", want{3, 1, ""})
	check("k9 by override", "192.0.2.1", "k9", want{5, 4, ""})
	err := e.Reload(mustParse(t, `{"rules": [{"name": "r", "limit": 3, "window": "1m"}],
		"tiers": [{"name": "t", "clients": ["k1"], "rules": [{"name": "t-r", "limit": 4, "window": "1m"}]}],
		"overrides": [{"rule": "r", "id": "k2", "limit": 3}]}`))
	if err != nil {
		t.Fatal(err)
	}
	check("k1 in a tier", "192.0.2.1", "k1", want{4, 3, "t"})
	check("k2 by override", "192.0.2.1", "k2", want{3, 2, ""})
	check("k9 no longer listed", "192.0.2.1", "k9", want{3, 0, ""})
}
