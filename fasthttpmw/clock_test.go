package fasthttpmw

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/mwtest"
)

// clockSpy records the clock each rule's limiter was given and the instant
// of every decision.
type clockSpy struct {
	mu     sync.Mutex
	clocks map[string]shardlimit.Clock // by rule
	nows   []time.Time
}

func (s *clockSpy) newLimiter(rule string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
	l, err := shardlimit.New(cfg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.clocks[rule] = cfg.Clock
	s.mu.Unlock()
	return spyLimiter{l, s}, nil
}

// spyLimiter is a limiter that reports its decisions' instants to a spy.
type spyLimiter struct {
	shardlimit.Limiter
	s *clockSpy
}

func (l spyLimiter) AllowBytesN(key []byte, now time.Time, n int) shardlimit.Result {
	l.s.mu.Lock()
	l.s.nows = append(l.s.nows, now)
	l.s.mu.Unlock()
	return l.Limiter.AllowBytesN(key, now, n)
}

// AllowBytesNow decides at the limiter's own clock: the spy records that
// clock's reading.
func (l spyLimiter) AllowBytesNow(key []byte, n int) shardlimit.Result {
	l.s.mu.Lock()
	l.s.nows = append(l.s.nows, l.Limiter.Config().Clock.Now())
	l.s.mu.Unlock()
	return l.Limiter.AllowBytesNow(key, n)
}

// TestDecisionsUseTheLimitersClock checks that, without Options.Clock, a
// request is decided at the instant the rule limiters' own clock (the one
// the janitor judges their idleness by) reads when the middleware runs: not at
// ctx.Time(), the wall time at which fasthttp started the request. Here the
// request starts before the middleware even exists, as one held up by slow
// middleware in front would; the limiters get one clock, also after Reload.
func TestDecisionsUseTheLimitersClock(t *testing.T) {
	var req fasthttp.Request
	req.SetRequestURI("/a")
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 40000}, nil)

	spy := &clockSpy{clocks: map[string]shardlimit.Clock{}}
	mw, err := New(Config{Options: httplimit.Options{
		Rules: mwtest.MustRules(t, `{"rules": [
			{"name": "a", "path": "/a", "limit": 10, "window": "1m"},
			{"name": "b", "path": "/b", "algorithm": "sliding_log", "limit": 10, "window": "1m"}
		]}`),
		NewLimiter: spy.newLimiter,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	err = mw.Reload(mwtest.MustRules(t, `{"rules": [
		{"name": "a", "path": "/a", "limit": 10, "window": "1m"},
		{"name": "b", "path": "/b", "algorithm": "sliding_log", "limit": 10, "window": "1m"},
		{"name": "c", "path": "/c", "algorithm": "gcra", "limit": 10, "window": "1m"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	clock := spy.clocks["a"]
	if clock == nil {
		t.Fatal("rule a's limiter got no clock")
	}
	for _, rule := range []string{"b", "c"} {
		if spy.clocks[rule] != clock {
			t.Errorf("rule %s's limiter has another clock than rule a's", rule)
		}
	}

	h := mw.Wrap(func(*fasthttp.RequestCtx) {})
	before := clock.Now()
	h(&ctx)
	after := clock.Now()
	if ctx.Response.StatusCode() != fasthttp.StatusOK || len(spy.nows) != 1 {
		t.Fatalf("status %d, %d decisions", ctx.Response.StatusCode(), len(spy.nows))
	}
	if now := spy.nows[0]; now.Before(before) || now.After(after) {
		t.Errorf("decided at %v, not within the limiters' clock's [%v, %v] around the call (ctx.Time() %v)",
			now, before, after, ctx.Time())
	}
}
