package mwengine

import (
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/httplimit"
)

// TestShadowCountsBannedAndOverCapRequests checks that a shadow rule
// decides and counts the requests of its route whatever the enforced rule
// answered: a request refused by a ban or by a concurrency cap too, as
// one the limiter denied or a rule's list decided.
func TestShadowCountsBannedAndOverCapRequests(t *testing.T) {
	e, clk := banEngine(t, `{"rules": [
		{"name": "a", "path": "/a", "limit": 1, "window": "1m",
		 "ban": {"after": 1, "within": "1m", "for": "10m"}, "concurrency": {"limit": 1}},
		{"name": "a-try", "path": "/a", "limit": 100, "window": "1m", "shadow": true}]}`, httplimit.Options{})
	want := []httplimit.Action{httplimit.ActionAllow, httplimit.ActionDeny, httplimit.ActionBanned}
	for i, w := range want {
		if o := at(e, clk, "192.0.2.1", "/a", time.Second); o.Action != w {
			t.Fatalf("request %d: %v, want %v", i, o.Action, w)
		}
	}
	held := decide(e, "192.0.2.2", "", "/a", time.Second, 1)
	defer e.Release(held.InFlight)
	if o := decide(e, "192.0.2.2", "", "/a", time.Second, 1); o.Action != httplimit.ActionTooManyInFlight {
		t.Fatalf("second request in flight: %v", o.Action)
	}
	for _, rs := range e.RuleStats() {
		if rs.Name == "a-try" && rs.Stats.Allowed != 5 {
			t.Errorf("shadow rule counted %d requests, want 5 (every request of its route)", rs.Stats.Allowed)
		}
	}
}
