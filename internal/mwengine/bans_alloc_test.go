//go:build !race

package mwengine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestBanAndInFlightAllocs checks that the allowed path of a rule with a ban and
// a concurrency limit allocates nothing for a known client: the ban
// looked up, an in-flight slot taken and given back.
func TestBanAndInFlightAllocs(t *testing.T) {
	rules := mustParse(t, `{"rules": [{"name": "a", "prefix": "/", "limit": 1000000000, "window": "1h",
		"ban": {"after": 3, "within": "1m", "for": "1m"}, "concurrency": {"limit": 10}}]}`)
	e := newTestEngine(t, httplimit.Options{Rules: rules})
	// A ban set elsewhere makes every rule look bans up.
	if err := e.SetBan("a", "ip:192.0.2.1", 60e9); err != nil {
		t.Fatal(err)
	}
	q := Request[[]byte]{Method: []byte("GET"), Path: []byte("/x"), Client: netip.MustParseAddr("2001:db8::1"), Now: e.Clock().Now(), Cost: 1}
	var out Outcome
	run := func() {
		sc := e.GetScratch()
		Decide(e, sc, &q, &out)
		e.PutScratch(sc)
		e.Release(out.InFlight)
	}
	run()
	if n := testing.AllocsPerRun(1000, run); n != 0 || out.Action != httplimit.ActionAllow {
		t.Errorf("%v allocs per decision (%v), want 0", n, out.Action)
	}
}

// TestBannedAllocs checks that a banned request allocates nothing: the ban
// looked up and the limiter peeked for its RetryAfter.
func TestBannedAllocs(t *testing.T) {
	rules := mustParse(t, `{"rules": [{"name": "a", "prefix": "/", "limit": 1, "window": "1h",
		"ban": {"after": 1, "within": "1m", "for": "1m"}}]}`)
	e := newTestEngine(t, httplimit.Options{Rules: rules})
	q := Request[[]byte]{Method: []byte("GET"), Path: []byte("/x"), Client: netip.MustParseAddr("2001:db8::1"), Now: e.Clock().Now(), Cost: 1}
	var out Outcome
	run := func() {
		sc := e.GetScratch()
		Decide(e, sc, &q, &out)
		e.PutScratch(sc)
	}
	run() // allowed
	run() // denied: banned for 1m
	run()
	if n := testing.AllocsPerRun(1000, run); n != 0 || out.Action != httplimit.ActionBanned || out.Result.RetryAfter <= time.Minute {
		t.Errorf("%v allocs per decision (%v, RetryAfter %v), want 0 (banned, the limiter's wait of about 1h)", n, out.Action, out.Result.RetryAfter)
	}
}
