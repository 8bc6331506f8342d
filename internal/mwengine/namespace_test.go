package mwengine

import (
	"strings"
	"testing"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// oneStore is a store every limiter of a NewLimiter shares, as Redis is
// shared by limiters of package sync with one Prefix: the factory hands
// every rule a view of one in-process limiter, built with the first
// configuration it is given, whose Close does nothing.
type oneStore struct {
	lim shardlimit.Limiter
}

// storeView is one rule's view of a oneStore.
type storeView struct{ shardlimit.Limiter }

func (storeView) Close() error { return nil }

// build is the Options.NewLimiter of s: it ignores the rule's name.
func (s *oneStore) build(_ string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
	if s.lim == nil {
		l, err := shardlimit.New(cfg)
		if err != nil {
			return nil, err
		}
		s.lim = l
	}
	return storeView{s.lim}, nil
}

// newStoreEngine returns an engine on rules js whose every rule's limiter
// is a view of store, closed with the store by the test's cleanup.
func newStoreEngine(t *testing.T, store *oneStore, js string) *Engine {
	t.Helper()
	e, err := New(httplimit.Options{
		Rules:      mustParse(t, js),
		Clock:      shardlimit.NewManualClock(t0),
		NewLimiter: store.build,
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		if store.lim != nil {
			store.lim.Close()
		}
	})
	return e
}

// admits sends n requests of client ip to path and returns how many were
// admitted.
func admits(e *Engine, ip, path string, n int) int {
	ok := 0
	for range n {
		if decide(e, ip, "", path, 0, 1).Action == httplimit.ActionAllow {
			ok++
		}
	}
	return ok
}

const twoRules = `{"rules": [
	{"name": "a", "path": "/a", "limit": 5, "window": "1m"},
	{"name": "b", "path": "/b", "limit": 5, "window": "1m"}
]}`

// TestNamespaceOneStore: two rules of one window whose factory gives both
// one store keep separate counters: requests to /a never spend /b's
// budget, and the keys shown (TopDenied) are client keys, without the
// namespace, which RuleStats gives.
func TestNamespaceOneStore(t *testing.T) {
	var store oneStore
	e := newStoreEngine(t, &store, twoRules)
	if got := admits(e, "192.0.2.9", "/a", 6); got != 5 {
		t.Fatalf("/a admitted %d of 6, want 5", got)
	}
	if got := admits(e, "192.0.2.9", "/b", 6); got != 5 {
		t.Fatalf("/b admitted %d of 6 after /a's 6, want 5: the rules share counters", got)
	}
	top, _ := e.TopDenied(0)
	for _, d := range top {
		if d.Key != "ip:192.0.2.9" {
			t.Errorf("TopDenied lists key %q on rule %q, want the client key ip:192.0.2.9", d.Key, d.Rule)
		}
	}
	if len(top) != 2 {
		t.Errorf("TopDenied: %+v, want one entry per rule", top)
	}
	for _, rs := range e.RuleStats() {
		if want := httplimit.KeyNamespace(rs.Name); rs.KeyPrefix != want {
			t.Errorf("rule %q: KeyPrefix %q, want %q", rs.Name, rs.KeyPrefix, want)
		}
		r := store.lim.Peek(rs.KeyPrefix+"ip:192.0.2.9", t0, 0)
		if r.Remaining != 0 {
			t.Errorf("rule %q: the store holds %d remaining under the rule's key, want 0", rs.Name, r.Remaining)
		}
	}
	if r := store.lim.Peek("ip:192.0.2.9", t0, 0); r.Remaining != 5 {
		t.Errorf("the store holds %d remaining under the bare client key, want 5 (untouched)", r.Remaining)
	}
}

// TestNamespaceEngineBuilt: limiters the engine builds itself are passed
// the client key alone.
func TestNamespaceEngineBuilt(t *testing.T) {
	e, err := New(httplimit.Options{Rules: mustParse(t, twoRules), Clock: shardlimit.NewManualClock(t0)}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	admits(e, "192.0.2.9", "/a", 2)
	for _, rs := range e.RuleStats() {
		if rs.KeyPrefix != "" {
			t.Errorf("rule %q: KeyPrefix %q, want none", rs.Name, rs.KeyPrefix)
		}
		if rs.Name == "a" && rs.Limiter.Peek("ip:192.0.2.9", t0, 0).Remaining != 3 {
			t.Errorf("rule a: the client key does not hold its 2 requests")
		}
	}
}

// TestNamespaceOverrides: an override's per-client limit reaches the
// client in the rule's namespace, and only on its rule; a reload that
// drops it clears it there.
func TestNamespaceOverrides(t *testing.T) {
	var store oneStore
	e := newStoreEngine(t, &store, `{"rules": [
		{"name": "a", "path": "/a", "limit": 5, "window": "1m"},
		{"name": "b", "path": "/b", "limit": 5, "window": "1m"}
	], "overrides": [{"rule": "a", "ip": "192.0.2.9", "limit": 2}]}`)
	if got := admits(e, "192.0.2.9", "/a", 4); got != 2 {
		t.Fatalf("/a admitted %d of 4 to the client limited to 2", got)
	}
	if got := admits(e, "192.0.2.9", "/b", 6); got != 5 {
		t.Fatalf("/b admitted %d of 6, want 5: the override of rule a reached b", got)
	}
	if err := e.Reload(mustParse(t, twoRules)); err != nil {
		t.Fatal(err)
	}
	if got := admits(e, "192.0.2.9", "/a", 4); got != 3 {
		t.Fatalf("/a admitted %d of 4 after the override was dropped, want 3 (5 less the 2 spent)", got)
	}
}

// TestNamespaceStable: the namespace depends on the rule's name alone. Two
// engines on one store (two nodes of a cluster) that list the rules in
// other orders share each rule's counters and no other; a renamed rule
// starts afresh.
func TestNamespaceStable(t *testing.T) {
	var store oneStore
	e1 := newStoreEngine(t, &store, twoRules)
	e2 := newStoreEngine(t, &store, `{"rules": [
		{"name": "b", "path": "/b", "limit": 5, "window": "1m"},
		{"name": "a", "path": "/a", "limit": 5, "window": "1m"}
	]}`)
	if got := admits(e1, "192.0.2.9", "/a", 3) + admits(e2, "192.0.2.9", "/a", 3); got != 5 {
		t.Fatalf("/a admitted %d of 3+3 on two engines sharing the rule, want 5", got)
	}
	if got := admits(e2, "192.0.2.9", "/b", 6); got != 5 {
		t.Fatalf("/b admitted %d of 6, want 5", got)
	}
	if err := e2.Reload(mustParse(t, strings.Replace(twoRules, `"name": "a"`, `"name": "a2"`, 1))); err != nil {
		t.Fatal(err)
	}
	if got := admits(e2, "192.0.2.9", "/a", 6); got != 5 {
		t.Fatalf("/a admitted %d of 6 after the rule was renamed, want 5 (fresh counters)", got)
	}
}

// TestNamespaceKeyCap: the limiter's MaxKeyBytes counts the namespace: the
// longest client key (an identity's digest) is decided.
func TestNamespaceKeyCap(t *testing.T) {
	var hook hookLog
	e, err := New(httplimit.Options{
		Rules:      mustParse(t, `{"rules": [{"name": "a", "prefix": "/", "limit": 5, "window": "1m"}]}`),
		Keys:       httplimit.KeyConfig{Header: "X-Client", UnknownIdentity: httplimit.UnknownIdentityOwnKey},
		Clock:      shardlimit.NewManualClock(t0),
		NewLimiter: hook.build,
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	k := e.keys
	if got, want := hook.built["a"].MaxKeyBytes, httplimit.KeyNamespaceLen+k.maxKeyLen(); got != want {
		t.Errorf("MaxKeyBytes %d, want %d", got, want)
	}
	for _, id := range []string{strings.Repeat("x", httplimit.DefaultMaxKeyBytes), strings.Repeat("y", 500)} {
		if d := decide(e, "192.0.2.9", id, "/", 0, 1); d.Action != httplimit.ActionAllow {
			t.Errorf("identity of %d bytes: %v %v", len(id), d.Action, d.Result.Err)
		}
	}
}
