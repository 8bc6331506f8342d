package mwengine

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// hookLog is an Options.NewLimiter that builds limiters with
// shardlimit.New and records what it built.
type hookLog struct {
	mu    sync.Mutex
	built map[string]shardlimit.Config // by rule
	made  []shardlimit.Limiter
}

func (h *hookLog) build(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.built == nil {
		h.built = map[string]shardlimit.Config{}
	}
	h.built[rule] = cfg
	l, err := shardlimit.New(cfg)
	if err == nil {
		h.made = append(h.made, l)
	}
	return l, err
}

// closed reports whether l answers ErrClosed.
func closed(l shardlimit.Limiter) bool {
	return errors.Is(l.AllowN("x", t0, 1).Err, shardlimit.ErrClosed)
}

// TestNewLimiterHook: Options.NewLimiter builds every rule's limiter with
// the rule's name and derived configuration, is called again only for
// rules whose limiter must change, and its limiters are closed by the
// engine.
func TestNewLimiterHook(t *testing.T) {
	var hook hookLog
	clock := shardlimit.NewManualClock(t0)
	e, err := New(httplimit.Options{
		Rules: mustParse(t, `{"rules": [
			{"name": "a", "path": "/a", "limit": 2, "window": "1m"},
			{"name": "b", "path": "/b", "algorithm": "sliding_counter", "limit": 3, "window": "1m", "buckets": 6}
		]}`),
		Limiter:    shardlimit.Config{MaxKeys: 100},
		Clock:      clock,
		NewLimiter: hook.build,
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	a, b := hook.built["a"], hook.built["b"]
	if a.Algorithm != shardlimit.FixedWindow || a.Limit != 2 || a.Window != time.Minute || a.MaxKeys != 100 || a.Clock != clock {
		t.Errorf("config of rule a: %+v", a)
	}
	if b.Algorithm != shardlimit.SlidingCounter || b.Limit != 3 || b.Buckets != 6 {
		t.Errorf("config of rule b: %+v", b)
	}
	for i, want := range []bool{true, true, false} {
		if d := decide(e, "192.0.2.1", "", "/a", 0, 1); d.Result.Allowed != want {
			t.Fatalf("request %d on /a: %+v", i, d.Result)
		}
	}

	checkHookOnReload(t, e, &hook)
}

// checkHookOnReload checks that a limit change keeps a rule's limiter and
// an algorithm change builds anew (closing the one replaced), and that
// Close closes every limiter hook built.
func checkHookOnReload(t *testing.T, e *Engine, hook *hookLog) {
	t.Helper()
	clear(hook.built)
	if err := e.Reload(mustParse(t, `{"rules": [
		{"name": "a", "path": "/a", "limit": 5, "window": "1m"},
		{"name": "b", "path": "/b", "algorithm": "sliding_log", "limit": 3, "window": "1m"}
	]}`)); err != nil {
		t.Fatal(err)
	}
	if _, ok := hook.built["a"]; ok || len(hook.built) != 1 || hook.built["b"].Algorithm != shardlimit.SlidingLog {
		t.Errorf("Reload built %v, want only rule b", slices.Sorted(maps.Keys(hook.built)))
	}
	if !closed(hook.made[1]) {
		t.Error("the replaced limiter of rule b is not closed")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for i, l := range hook.made {
		if !closed(l) {
			t.Errorf("limiter %d not closed by Close", i)
		}
	}
}

// TestNewLimiterHookErrors: an error or a nil limiter of
// Options.NewLimiter fails construction with the rule's name, and the
// limiters built before the failure are closed.
func TestNewLimiterHookErrors(t *testing.T) {
	var hook hookLog
	boom := errors.New("boom")
	_, err := New(httplimit.Options{
		Rules: mustParse(t, `{"rules": [
			{"name": "a", "path": "/a", "limit": 2, "window": "1m"},
			{"name": "b", "path": "/b", "limit": 2, "window": "1m"}
		]}`),
		NewLimiter: func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
			if rule == "b" {
				return nil, boom
			}
			return hook.build(rule, cfg)
		},
	}, false)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `rule "b"`) {
		t.Errorf("New with a failing hook: %v", err)
	}
	for _, l := range hook.made {
		if !closed(l) {
			t.Error("a limiter built before the failure is not closed")
		}
	}
	_, err = New(httplimit.Options{
		Rules:      mustParse(t, `{"rules": [{"name": "a", "path": "/a", "limit": 2, "window": "1m"}]}`),
		NewLimiter: func(string, shardlimit.Config) (shardlimit.Limiter, error) { return nil, nil },
	}, false)
	if err == nil || !strings.Contains(err.Error(), `rule "a": NewLimiter returned a nil limiter`) {
		t.Errorf("New with a hook returning nil: %v", err)
	}
}
