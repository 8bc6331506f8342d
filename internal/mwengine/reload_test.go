package mwengine

import (
	"errors"
	"slices"
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
	rt := newRetireTest(t)
	rt.check("b by the override", "192.0.2.9", 0, answer{httplimit.ActionAllow, 5, 4})
	rt.check("b by the default", "192.0.2.1", 0, answer{httplimit.ActionAllow, 1, 0})

	rt.reload(5*time.Second, rt.withoutB)
	e, b := rt.e, rt.limiters("b")[0]
	if probeClosed(b) || len(e.retired) != 1 || e.Stats().Rules != 1 {
		t.Fatalf("b's limiter after its rule left: closed %v, %d set aside, %d rules", probeClosed(b), len(e.retired), e.Stats().Rules)
	}
	rt.check("b gone", "192.0.2.9", 5*time.Second, answer{httplimit.ActionNoRule, 0, 0})

	rt.reload(10*time.Second, rt.withB)
	if n := len(rt.limiters("b")); n != 1 || len(e.retired) != 0 {
		t.Fatalf("b came back with a new limiter (%d built), %d set aside", n, len(e.retired))
	}
	rt.check("b back, override and count kept", "192.0.2.9", 10*time.Second, answer{httplimit.ActionAllow, 5, 3})
	rt.check("b back, count kept", "192.0.2.1", 10*time.Second, answer{httplimit.ActionDeny, 1, 0})

	rt.closedOnceFresh(b)
	rt.closeClosesAll()
}

// closedOnceFresh sets b, rule b's limiter, aside again: a reload within
// the window keeps it, the first one after every key's window has ended
// closes it, and rule b back then gets a fresh limiter.
func (rt *retireTest) closedOnceFresh(b shardlimit.Limiter) {
	t, e := rt.t, rt.e
	t.Helper()
	rt.reload(20*time.Second, rt.withoutB)
	rt.reload(59*time.Second, rt.withoutB)
	if probeClosed(b) {
		t.Fatal("b's limiter closed while its keys still counted")
	}
	rt.reload(60*time.Second, rt.withoutB) // the fixed window of t=0..60 has ended
	if !probeClosed(b) || len(e.retired) != 0 {
		t.Fatalf("b's limiter once its keys were fresh: closed %v, %d set aside", probeClosed(b), len(e.retired))
	}
	rt.reload(80*time.Second, rt.withB)
	if n := len(rt.limiters("b")); n != 2 {
		t.Fatalf("b came back after its limiter was closed: %d limiters built, want 2", n)
	}
	rt.check("b fresh", "192.0.2.1", 80*time.Second, answer{httplimit.ActionAllow, 1, 0})
}

// closeClosesAll checks that Close closes the limiters set aside too.
func (rt *retireTest) closeClosesAll() {
	t := rt.t
	t.Helper()
	rt.reload(81*time.Second, rt.withoutB)
	if err := rt.e.Close(); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for rule, ls := range rt.built {
		for i, l := range ls {
			if !probeClosed(l) {
				t.Errorf("limiter %d of rule %s not closed by Close", i, rule)
			}
		}
	}
}

// retireTest is TestRemovedRulesKeepTheirLimiters' engine, switched
// between rules with rule b and without, and the limiters it built.
type retireTest struct {
	t               *testing.T
	e               *Engine
	clock           *shardlimit.ManualClock
	withB, withoutB *httplimit.Rules
	mu              sync.Mutex
	built           map[string][]shardlimit.Limiter // by rule
}

// newRetireTest returns a retireTest with rule b in force.
func newRetireTest(t *testing.T) *retireTest {
	rt := &retireTest{
		t:     t,
		clock: shardlimit.NewManualClock(t0),
		withB: mustParse(t, `{"rules": [
			{"name": "a", "path": "/a", "limit": 2, "window": "1m"},
			{"name": "b", "path": "/b", "limit": 1, "window": "1m"}
		], "overrides": [{"rule": "b", "ip": "192.0.2.9", "limit": 5}]}`),
		withoutB: mustParse(t, `{"rules": [{"name": "a", "path": "/a", "limit": 2, "window": "1m"}]}`),
		built:    map[string][]shardlimit.Limiter{},
	}
	rt.e = newTestEngine(t, httplimit.Options{
		Rules: rt.withB,
		Clock: rt.clock,
		NewLimiter: func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
			l, err := shardlimit.New(cfg)
			rt.mu.Lock()
			rt.built[rule] = append(rt.built[rule], l)
			rt.mu.Unlock()
			return l, err
		},
	})
	return rt
}

// limiters returns the limiters built for rule.
func (rt *retireTest) limiters(rule string) []shardlimit.Limiter {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.built[rule])
}

// answer is what retireTest.check expects of a decision.
type answer struct {
	action           httplimit.Action
	limit, remaining int
}

// check decides a request to /b from ip at t0+at.
func (rt *retireTest) check(step, ip string, at time.Duration, want answer) {
	rt.t.Helper()
	d := decide(rt.e, ip, "", "/b", at, 1)
	if d.Action != want.action || d.Result.Limit != want.limit || d.Result.Remaining != want.remaining {
		rt.t.Errorf("%s: %v, limit %d, remaining %d; want %v, %d, %d", step, d.Action, d.Result.Limit, d.Result.Remaining, want.action, want.limit, want.remaining)
	}
}

// reload puts r in force at t0+at.
func (rt *retireTest) reload(at time.Duration, r *httplimit.Rules) {
	rt.t.Helper()
	rt.clock.Set(t0.Add(at))
	if err := rt.e.Reload(r); err != nil {
		rt.t.Fatal(err)
	}
}

// probeClosed reports whether l answers ErrClosed, consuming nothing.
func probeClosed(l shardlimit.Limiter) bool {
	return errors.Is(l.AllowN("probe", t0, 0).Err, shardlimit.ErrClosed)
}
