package mwengine

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// failingLimiter is a limiter whose decisions for one key fail with errOops.
type failingLimiter struct {
	shardlimit.Limiter
	key string
}

var errOops = errors.New("store on fire")

func (f failingLimiter) AllowBytesN(key []byte, now time.Time, n int) shardlimit.Result {
	if string(key) == f.key {
		return shardlimit.Result{Err: errOops}
	}
	return f.Limiter.AllowBytesN(key, now, n)
}

// statsEngine returns an engine that has decided a known sequence of
// requests: allowed, denied, failed (a full table, an instant before 1970,
// a failing limiter), of a bad cost, without a rule, by a tier's client.
func statsEngine(t *testing.T) *Engine {
	t.Helper()
	e := newTestEngine(t, httplimit.Options{
		Rules: mustParse(t, `{"rules": [
			{"name": "a", "path": "/a", "limit": 2, "window": "1m"},
			{"name": "b", "prefix": "/b/", "methods": ["get"], "algorithm": "sliding_counter", "buckets": 6, "limit": 1, "window": "1m"},
			{"name": "x", "path": "/x", "limit": 5, "window": "1h"}
		], "tiers": [{"name": "gold", "clients": ["client-1"], "rules": [
			{"name": "g", "path": "/a", "algorithm": "gcra", "limit": 1, "window": "1s"}
		]}]}`),
		Keys:    httplimit.KeyConfig{Header: "X-Client-ID"},
		Limiter: shardlimit.Config{Shards: 1, MaxKeys: 2},
		NewLimiter: func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
			l, err := shardlimit.New(cfg)
			if rule == "x" && err == nil {
				return failingLimiter{l, httplimit.KeyNamespace(rule) + "ip:192.0.2.99"}, nil
			}
			return l, err
		},
	})
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	run := func(method, path, id string, client netip.Addr, now time.Time, cost int) httplimit.Action {
		sc := e.GetScratch()
		defer e.PutScratch(sc)
		var o Outcome
		Decide(e, sc, &Request[string]{Method: method, Path: path, Identity: id, Client: client, Now: now, Cost: cost}, &o)
		return o.Action
	}
	want := func(got, want httplimit.Action) {
		t.Helper()
		if got != want {
			t.Fatalf("action %v, want %v", got, want)
		}
	}
	for i := range 3 {
		want(run("GET", "/a", "", ip("192.0.2.1"), t0, 1), []httplimit.Action{httplimit.ActionAllow, httplimit.ActionAllow, httplimit.ActionDeny}[i])
	}
	want(run("GET", "/a", "", ip("192.0.2.2"), t0, 1), httplimit.ActionAllow)
	want(run("GET", "/a", "", ip("192.0.2.3"), t0, 1), httplimit.ActionFailClosed) // a full table
	want(run("GET", "/a", "", ip("192.0.2.1"), t0, -1), httplimit.ActionBadCost)
	want(run("GET", "/a", "", ip("192.0.2.1"), time.Unix(-1, 0), 1), httplimit.ActionFailClosed) // an instant before 1970
	for i := range 4 {
		want(run("GET", "/b/c", "", ip("2001:db8::1"), t0, 1), []httplimit.Action{httplimit.ActionAllow, httplimit.ActionDeny, httplimit.ActionDeny, httplimit.ActionDeny}[i])
	}
	want(run("POST", "/b/c", "", ip("2001:db8::1"), t0, 1), httplimit.ActionNoRule)
	want(run("GET", "/a", "client-1", ip("192.0.2.1"), t0, 1), httplimit.ActionAllow)
	want(run("GET", "/a", "client-1", ip("192.0.2.1"), t0, 1), httplimit.ActionDeny)
	want(run("GET", "/x", "", ip("192.0.2.99"), t0, 1), httplimit.ActionFailClosed)
	return e
}

// TestRuleStats checks every rule's description and counters, and failed
// decisions by cause, after statsEngine's requests.
func TestRuleStats(t *testing.T) {
	e := statsEngine(t)
	got := e.RuleStats()
	if len(got) != 4 {
		t.Fatalf("%d rules, want 4: %+v", len(got), got)
	}
	for i, w := range []httplimit.RuleStats{
		{Name: "a", Path: "/a", Algorithm: shardlimit.FixedWindow, Limit: 2, Window: time.Minute,
			Stats:  shardlimit.Stats{Allowed: 3, Denied: 1, Keys: 2, Refused: 1},
			Errors: httplimit.ErrorCounts{TooManyKeys: 1, Invalid: 1}, BadCost: 1},
		{Name: "b", Path: "/b/", Prefix: true, Methods: []string{"GET"}, Algorithm: shardlimit.SlidingCounter, Limit: 1, Window: time.Minute, Buckets: 6,
			Stats: shardlimit.Stats{Allowed: 1, Denied: 3, Keys: 1}},
		{Name: "g", Tier: "gold", Path: "/a", Algorithm: shardlimit.GCRA, Limit: 1, Window: time.Second,
			Stats: shardlimit.Stats{Allowed: 1, Denied: 1, Keys: 1}},
		{Name: "x", Path: "/x", Algorithm: shardlimit.FixedWindow, Limit: 5, Window: time.Hour,
			Errors: httplimit.ErrorCounts{Other: 1}},
	} {
		g := got[i]
		if g.Limiter == nil {
			t.Errorf("rule %s: no limiter", g.Name)
		}
		g.Limiter, w.Limiter = nil, nil
		if want := httplimit.KeyNamespace(g.Name); g.KeyPrefix != want {
			t.Errorf("rule %s: KeyPrefix %q, want %q", g.Name, g.KeyPrefix, want)
		}
		g.KeyPrefix = ""
		if fmt.Sprintf("%+v", g) != fmt.Sprintf("%+v", w) {
			t.Errorf("rule %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	if _, ok := got[3].Limiter.(failingLimiter); !ok {
		t.Errorf("rule x's Limiter is %T, want the one NewLimiter built", got[3].Limiter)
	}
}

// TestTopDenied checks the most-denied keys and the totals after
// statsEngine's requests.
func TestTopDenied(t *testing.T) {
	e := statsEngine(t)
	top, total := e.TopDenied(0)
	wantTop := []httplimit.DeniedKey{{Rule: "b", Key: "ip:2001:db8::/64", Count: 3}, {Rule: "a", Key: "ip:192.0.2.1", Count: 1}, {Rule: "g", Key: "id:client-1", Count: 1}}
	if total != 5 || fmt.Sprint(top) != fmt.Sprint(wantTop) {
		t.Errorf("TopDenied(0) = %v, %d; want %v, 5", top, total, wantTop)
	}
	if top, _ := e.TopDenied(1); len(top) != 1 || top[0].Rule != "b" {
		t.Errorf("TopDenied(1) = %v", top)
	}
	if st := e.Stats(); st.Errors != 3 || st.BadCost != 1 || st.Allowed != 5 || st.Denied != 5 {
		t.Errorf("Stats %+v", st)
	}
}

// TestTopDeniedOptions: dry-run denials count as denials, and a capacity
// of K lists at most K pairs, each with counts that bound the truth and a
// positive guaranteed count.
func TestTopDeniedOptions(t *testing.T) {
	rules := `{"rules": [{"name": "r", "limit": 1, "window": "1m"}]}`
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, rules), DryRun: true, TopDenied: 2})
	truth := map[string]uint64{}
	for i := range 30 {
		client := fmt.Sprintf("192.0.2.%d", 1+i%4+i%7/5)
		if d := decide(e, client, "", "/", 0, 1); d.Action == httplimit.ActionDryRunDeny {
			truth["ip:"+client]++
		}
	}
	top, total := e.TopDenied(0)
	var n uint64
	for _, c := range truth {
		n += c
	}
	if len(top) > 2 || total != n {
		t.Fatalf("TopDenied = %v, %d; want at most 2 pairs and %d denials", top, total, n)
	}
	for _, d := range top {
		if d.Rule != "r" || d.Count < truth[d.Key] || d.Guaranteed() > truth[d.Key] || d.Guaranteed() == 0 || d.Error*2 > n {
			t.Errorf("%+v: true count %d, N %d", d, truth[d.Key], n)
		}
	}
	if rs := e.RuleStats(); len(rs) != 1 || !rs[0].DryRun || rs[0].Stats.Denied != n {
		t.Errorf("RuleStats %+v, want dry run with %d denied", rs, n)
	}
}

// TestTopDeniedOff: a negative TopDenied keeps no summary.
func TestTopDeniedOff(t *testing.T) {
	rules := `{"rules": [{"name": "r", "limit": 1, "window": "1m"}]}`
	off := newTestEngine(t, httplimit.Options{Rules: mustParse(t, rules), TopDenied: -1})
	decide(off, "192.0.2.1", "", "/", 0, 1)
	if d := decide(off, "192.0.2.1", "", "/", 0, 1); d.Action != httplimit.ActionDeny {
		t.Fatalf("%v", d.Action)
	}
	if top, total := off.TopDenied(0); top != nil || total != 0 {
		t.Errorf("TopDenied with the summary off: %v, %d", top, total)
	}
}

// TestTopDeniedFloodListsOnlyTheHeavyHitter: a flood of addresses denied
// once each, 50 times more than the summary tracks, lists none of them;
// an address denied once in every ten requests amid the flood is listed,
// alone, with counts that bound its true number of denials.
func TestTopDeniedFloodListsOnlyTheHeavyHitter(t *testing.T) {
	rules := `{"rules": [{"name": "r", "limit": 0, "window": "1m"}]}`
	e := newTestEngine(t, httplimit.Options{Rules: mustParse(t, rules), TopDenied: 100})
	for i := range 5000 {
		decide(e, fmt.Sprintf("10.0.%d.%d", i/256, i%256), "", "/", 0, 1)
	}
	if top, total := e.TopDenied(0); len(top) != 0 || total != 5000 {
		t.Fatalf("after the flood: TopDenied = %v, %d; want none, 5000", top, total)
	}
	var heavy uint64
	for i := range 5000 {
		if i%10 == 0 {
			decide(e, "192.0.2.66", "", "/", 0, 1)
			heavy++
			continue
		}
		decide(e, fmt.Sprintf("10.1.%d.%d", i/256, i%256), "", "/", 0, 1)
	}
	top, total := e.TopDenied(0)
	if len(top) != 1 || total != 10000 || top[0].Key != "ip:192.0.2.66" {
		t.Fatalf("TopDenied = %v, %d; want ip:192.0.2.66 alone, 10000", top, total)
	}
	if d := top[0]; d.Count < heavy || d.Guaranteed() > heavy || d.Guaranteed() == 0 {
		t.Errorf("%+v (guaranteed %d): true count %d", d, d.Guaranteed(), heavy)
	}
}
