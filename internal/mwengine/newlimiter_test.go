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

// TestNewLimiterHook: Options.NewLimiter builds every rule's limiter with
// the rule's name and derived configuration, is called again only for
// rules whose limiter must change, and its limiters are closed by the
// engine; an error or a nil limiter fails construction with the rule's
// name.
func TestNewLimiterHook(t *testing.T) {
	var mu sync.Mutex
	built := map[string]shardlimit.Config{}
	var made []shardlimit.Limiter
	hook := func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
		mu.Lock()
		defer mu.Unlock()
		built[rule] = cfg
		l, err := shardlimit.New(cfg)
		if err == nil {
			made = append(made, l)
		}
		return l, err
	}
	clock := shardlimit.NewManualClock(t0)
	e, err := New(httplimit.Options{
		Rules: mustParse(t, `{"rules": [
			{"name": "a", "path": "/a", "limit": 2, "window": "1m"},
			{"name": "b", "path": "/b", "algorithm": "sliding_counter", "limit": 3, "window": "1m", "buckets": 6}
		]}`),
		Limiter:    shardlimit.Config{MaxKeys: 100},
		Clock:      clock,
		NewLimiter: hook,
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	a, b := built["a"], built["b"]
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

	// A limit change keeps the limiter; an algorithm change builds anew.
	clear(built)
	if err := e.Reload(mustParse(t, `{"rules": [
		{"name": "a", "path": "/a", "limit": 5, "window": "1m"},
		{"name": "b", "path": "/b", "algorithm": "sliding_log", "limit": 3, "window": "1m"}
	]}`)); err != nil {
		t.Fatal(err)
	}
	if _, ok := built["a"]; ok || len(built) != 1 || built["b"].Algorithm != shardlimit.SlidingLog {
		t.Errorf("Reload built %v, want only rule b", slices.Sorted(maps.Keys(built)))
	}
	if r := made[1].AllowN("x", t0, 1); !errors.Is(r.Err, shardlimit.ErrClosed) {
		t.Errorf("the replaced limiter of rule b is not closed: %+v", r)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for i, l := range made {
		if r := l.AllowN("x", t0, 1); !errors.Is(r.Err, shardlimit.ErrClosed) {
			t.Errorf("limiter %d not closed by Close: %+v", i, r)
		}
	}

	// Errors name the rule; the limiters built before the failure are
	// closed.
	made = nil
	boom := errors.New("boom")
	_, err = New(httplimit.Options{
		Rules: mustParse(t, `{"rules": [
			{"name": "a", "path": "/a", "limit": 2, "window": "1m"},
			{"name": "b", "path": "/b", "limit": 2, "window": "1m"}
		]}`),
		NewLimiter: func(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
			if rule == "b" {
				return nil, boom
			}
			return hook(rule, cfg)
		},
	}, false)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `rule "b"`) {
		t.Errorf("New with a failing hook: %v", err)
	}
	for _, l := range made {
		if r := l.AllowN("x", t0, 1); !errors.Is(r.Err, shardlimit.ErrClosed) {
			t.Errorf("a limiter built before the failure is not closed: %+v", r)
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
