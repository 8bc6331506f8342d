package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/httpmw"
	"github.com/shardlimit/shardlimit/internal/redistest"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// onePrefixRules are two rules of one window and limit: the case of a
// factory that gives every rule's limiter one store and one Prefix.
const onePrefixRules = `{"rules": [
	{"name": "a", "path": "/a", "limit": 5, "window": "1h"},
	{"name": "b", "path": "/b", "limit": 5, "window": "1h"}
]}`

// storeFactory builds a rule's limiter on client under prefix.
type storeFactory func(client *redis.Client, prefix string, cfg shardlimit.Config) (shardlimit.Limiter, error)

// onePrefix is a net/http server on 127.0.0.1 limited by onePrefixRules
// whose limiters a storeFactory builds with one Prefix for every rule, as
// a newcomer's NewLimiter would (ignoring the rule's name, building its
// own Config from the fields it knows), and a client of it.
type onePrefix struct {
	t      *testing.T
	rc     *redis.Client
	prefix string
	srv    *httptest.Server
	hc     *http.Client

	mu   sync.Mutex
	lims []shardlimit.Limiter // every limiter built
}

// newOnePrefix starts it on the shared test Redis, with a unique prefix
// whose keys the test's cleanup deletes.
func newOnePrefix(t *testing.T, build storeFactory) *onePrefix {
	opt := &redis.Options{
		Addr:                  redistest.RequireRedis(t),
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		DialTimeout:           10 * time.Second, // generous: a loaded machine under -race
		ReadTimeout:           10 * time.Second,
		WriteTimeout:          10 * time.Second,
	}
	opt.Dialer = shardsync.LimitReplies(redis.NewDialer(opt), 0)
	p := &onePrefix{t: t, rc: redis.NewClient(opt), prefix: redistest.Prefix(t)}
	t.Cleanup(func() { _ = p.rc.Close() })
	t.Cleanup(p.deleteKeys)
	rules, err := httplimit.ParseRules([]byte(onePrefixRules))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{
		Rules: rules,
		// One instant for the whole test: no window ends during it.
		Clock: shardlimit.NewManualClock(time.Now()),
		NewLimiter: func(_ string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
			own := shardlimit.Config{Algorithm: cfg.Algorithm, Limit: cfg.Limit, Window: cfg.Window, Clock: cfg.Clock}
			l, err := build(p.rc, p.prefix, own)
			if err == nil {
				p.mu.Lock()
				p.lims = append(p.lims, l)
				p.mu.Unlock()
			}
			return l, err
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mw.Close() })
	p.srv = httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
	t.Cleanup(p.srv.Close)
	p.hc = &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	t.Cleanup(p.hc.CloseIdleConnections)
	return p
}

// deleteKeys deletes every key under p.prefix.
func (p *onePrefix) deleteKeys() {
	ctx := context.Background()
	keys, err := p.scan(ctx)
	if err == nil && len(keys) > 0 {
		err = p.rc.Del(ctx, keys...).Err()
	}
	if err != nil {
		p.t.Errorf("deleting the test's keys under %s: %v", p.prefix, err)
	}
}

// scan returns the keys under p.prefix, sorted.
func (p *onePrefix) scan(ctx context.Context) ([]string, error) {
	keys, err := p.rc.Keys(ctx, p.prefix+"*").Result()
	slices.Sort(keys)
	return keys, err
}

// admits sends n requests to path and returns how many were answered 200
// (the others must be 429), flushing every Shared limiter to Redis after
// each so that every limiter has read what the others counted.
func (p *onePrefix) admits(path string, n int) int {
	p.t.Helper()
	ok := 0
	for range n {
		resp, err := p.hc.Get(p.srv.URL + path)
		if err != nil {
			p.t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			p.t.Fatalf("GET %s: %s", path, resp.Status)
		}
		p.flush()
	}
	return ok
}

// flush flushes every Shared limiter built.
func (p *onePrefix) flush() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lims {
		if s, ok := l.(*shardsync.Shared); ok {
			if err := s.Flush(context.Background()); err != nil {
				p.t.Fatalf("Flush: %v", err)
			}
		}
	}
}

// checkOnePrefix: five requests to /a (and a sixth, denied) never spend
// /b's budget, whose five requests are all admitted; the Redis counters
// are one per rule, each holding its five.
func checkOnePrefix(t *testing.T, build storeFactory) {
	p := newOnePrefix(t, build)
	if got := p.admits("/a", 6); got != 5 {
		t.Fatalf("/a admitted %d of 6, want 5", got)
	}
	if got := p.admits("/b", 6); got != 5 {
		keys, _ := p.scan(context.Background())
		t.Fatalf("/b admitted %d of 6 after /a spent its 5, want 5: the rules count against each other; Redis holds %q", got, keys)
	}
	keys, err := p.scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bare := p.prefix + "{ip:127.0.0.1}"
	for _, rule := range []string{"a", "b"} {
		tag := p.prefix + "{" + httplimit.KeyNamespace(rule) + "ip:127.0.0.1}"
		if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, tag) }) {
			t.Errorf("rule %s: no Redis key starts with %s; keys: %q", rule, tag, keys)
		}
	}
	if slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, bare) }) {
		t.Errorf("a Redis key starts with %s, outside every rule's namespace; keys: %q", bare, keys)
	}
}

// TestOnePrefixShared is the newcomer's case on sync.Shared.
func TestOnePrefixShared(t *testing.T) {
	checkOnePrefix(t, func(c *redis.Client, prefix string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
		return shardsync.NewShared(c, shardsync.SharedConfig{Config: cfg, Prefix: prefix, FlushInterval: time.Minute})
	})
}

// TestOnePrefixExact is the newcomer's case on sync.Exact.
func TestOnePrefixExact(t *testing.T) {
	checkOnePrefix(t, func(c *redis.Client, prefix string, cfg shardlimit.Config) (shardlimit.Limiter, error) {
		return shardsync.NewExact(c, shardsync.ExactConfig{Config: cfg, Prefix: prefix, Timeout: 10 * time.Second})
	})
}
