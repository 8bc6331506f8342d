package mwengine

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// TestRemovedRulesKeepTheirLimiters follows a rule's limiter through
// reloads that remove the rule and bring it back: set aside with its
// counters (its per-key limits cleared, given back on return), closed by
// the first reload after its keys are all back to a fresh state, replaced
// by a fresh limiter after that, and closed by Close while set aside.
func TestRemovedRulesKeepTheirLimiters(t *testing.T) {
	var mu sync.Mutex
	built := map[string][]shardlimit.Limiter{}
	clock := shardlimit.NewManualClock(t0)
	withB := mustParse(t, `{"rules": [
		{"name": "a", "path": "/a", "limit": 2, "window": "1m"},
		{"name": "b", "path": "/b", "limit": 1, "window": "1m"}
	], "overrides": [{"rule": "b", "ip": "192.0.2.9", "limit": 5}]}`)
	withoutB := mustParse(t, `{"rules": [{"name": "a", "path": "/a", "limit": 2, "window": "1m"}]}`)
	e := newTestEngine(t, httplimit.Options{
		Rules: withB,
		Clock: clock,
		NewLimiter: func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
			l, err := shardlimit.New(cfg)
			mu.Lock()
			built[rule] = append(built[rule], l)
			mu.Unlock()
			return l, err
		},
	})
	// answer is what check expects of a decision.
	type answer struct {
		action           httplimit.Action
		limit, remaining int
	}
	check := func(step, ip string, at time.Duration, want answer) {
		t.Helper()
		d := decide(e, ip, "", "/b", at, 1)
		if d.Action != want.action || d.Result.Limit != want.limit || d.Result.Remaining != want.remaining {
			t.Errorf("%s: %v, limit %d, remaining %d; want %v, %d, %d", step, d.Action, d.Result.Limit, d.Result.Remaining, want.action, want.limit, want.remaining)
		}
	}
	reload := func(at time.Duration, r *httplimit.Rules) {
		t.Helper()
		clock.Set(t0.Add(at))
		if err := e.Reload(r); err != nil {
			t.Fatal(err)
		}
	}
	closed := func(l shardlimit.Limiter) bool {
		return errors.Is(l.AllowN("probe", t0, 0).Err, shardlimit.ErrClosed)
	}
	check("b by the override", "192.0.2.9", 0, answer{httplimit.ActionAllow, 5, 4})
	check("b by the default", "192.0.2.1", 0, answer{httplimit.ActionAllow, 1, 0})

	reload(5*time.Second, withoutB)
	b := built["b"][0]
	if closed(b) || len(e.retired) != 1 || e.Stats().Rules != 1 {
		t.Fatalf("b's limiter after its rule left: closed %v, %d set aside, %d rules", closed(b), len(e.retired), e.Stats().Rules)
	}
	check("b gone", "192.0.2.9", 5*time.Second, answer{httplimit.ActionNoRule, 0, 0})

	reload(10*time.Second, withB)
	if len(built["b"]) != 1 || len(e.retired) != 0 {
		t.Fatalf("b came back with a new limiter (%d built), %d set aside", len(built["b"]), len(e.retired))
	}
	check("b back, override and count kept", "192.0.2.9", 10*time.Second, answer{httplimit.ActionAllow, 5, 3})
	check("b back, count kept", "192.0.2.1", 10*time.Second, answer{httplimit.ActionDeny, 1, 0})

	// Set aside again; a reload within the window keeps it, the first one
	// after every key's window has ended closes it.
	reload(20*time.Second, withoutB)
	reload(59*time.Second, withoutB)
	if closed(b) {
		t.Fatal("b's limiter closed while its keys still counted")
	}
	reload(60*time.Second, withoutB) // the fixed window of t=0..60 has ended
	if !closed(b) || len(e.retired) != 0 {
		t.Fatalf("b's limiter once its keys were fresh: closed %v, %d set aside", closed(b), len(e.retired))
	}
	reload(80*time.Second, withB)
	if len(built["b"]) != 2 {
		t.Fatalf("b came back after its limiter was closed: %d limiters built, want 2", len(built["b"]))
	}
	check("b fresh", "192.0.2.1", 80*time.Second, answer{httplimit.ActionAllow, 1, 0})

	// Close closes the limiters set aside too.
	reload(81*time.Second, withoutB)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for rule, ls := range built {
		for i, l := range ls {
			if !closed(l) {
				t.Errorf("limiter %d of rule %s not closed by Close", i, rule)
			}
		}
	}
}
