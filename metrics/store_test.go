package metrics_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
	"github.com/shardlimit/shardlimit/metrics"
	shardsync "github.com/shardlimit/shardlimit/sync"
)

// TestStoreFamilies reads a sync.Shared and a sync.Exact limiter on the
// test Redis after known decisions: their store state, flushes, units sent
// and calls, beside the families every limiter has.
func TestStoreFamilies(t *testing.T) {
	addr := redistest.RequireRedis(t)
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	defer client.Close()
	prefix := redistest.Prefix(t)
	sh, err := shardsync.NewShared(client, shardsync.SharedConfig{
		Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 5, Window: time.Minute},
		Prefix: prefix + "shared:", FlushInterval: time.Minute, // flushed by the test within the minute
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	ex, err := shardsync.NewExact(client, shardsync.ExactConfig{
		Config: shardlimit.Config{Algorithm: shardlimit.GCRA, Limit: 2, Window: time.Minute},
		Prefix: prefix + "exact:", Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	now := time.Now()
	for range 7 {
		sh.AllowN("k", now, 1) // 5 allowed, 2 denied
	}
	for range 3 {
		ex.AllowN("k", now, 1) // 2 allowed, 1 denied
	}
	if err := sh.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := metrics.WriteText(&buf, metrics.Limiter("sh", sh), metrics.Limiter("ex", ex)); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, line := range []string{
		`shardlimit_limiter_info{algorithm="fixed_window",limiter="sh",store="shared"} 1`,
		`shardlimit_limiter_info{algorithm="gcra",limiter="ex",store="exact"} 1`,
		`shardlimit_decisions_total{limiter="sh",outcome="allowed"} 5`,
		`shardlimit_decisions_total{limiter="sh",outcome="denied"} 2`,
		`shardlimit_decisions_total{limiter="ex",outcome="allowed"} 2`,
		`shardlimit_decisions_total{limiter="ex",outcome="denied"} 1`,
		`shardlimit_store_healthy{limiter="ex"} 1`,
		`shardlimit_store_healthy{limiter="sh"} 1`,
		`shardlimit_store_trips_total{limiter="sh"} 0`,
		`shardlimit_shared_flushes_total{limiter="sh"} 1`,
		`shardlimit_shared_items_total{limiter="sh"} 1`,
		`shardlimit_shared_units_sent_total{limiter="sh"} 5`,
		`shardlimit_shared_units_dropped_total{limiter="sh"} 0`,
		`shardlimit_shared_pending_keys{limiter="sh"} 0`,
		`shardlimit_exact_calls_total{limiter="ex"} 3`,
		`shardlimit_exact_call_errors_total{limiter="ex"} 0`,
		`shardlimit_exact_policy_decisions_total{limiter="ex"} 0`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("no line %s", line)
		}
	}
	if strings.Contains(text, `shardlimit_shared_flushes_total{limiter="ex"}`) || strings.Contains(text, `shardlimit_exact_calls_total{limiter="sh"}`) {
		t.Error("a limiter reported another kind's families")
	}
	if t.Failed() {
		t.Log(text)
	}
	promtoolCheck(t, buf.Bytes())
	storeSeriesCounts(t, sh, ex)
}

// storeSeriesCounts counts the series of a sync.Shared and a sync.Exact
// limiter, as limiters, as rules and as one group, against the counts the
// package doc states.
func storeSeriesCounts(t *testing.T, sh, ex shardlimit.Limiter) {
	t.Helper()
	if _, n := scrape(t, metrics.Limiter("sh", sh)); n != perLimiter+sharedExtra {
		t.Errorf("a sync.Shared limiter: %d series, want %d", n, perLimiter+sharedExtra)
	}
	if _, n := scrape(t, metrics.Limiter("ex", ex)); n != perLimiter+exactExtra {
		t.Errorf("a sync.Exact limiter: %d series, want %d", n, perLimiter+exactExtra)
	}
	fake := &fakeMiddleware{rules: []httplimit.RuleStats{
		{Name: "sh", Limiter: sh, Stats: sh.Stats()},
		{Name: "ex", Limiter: ex, Stats: ex.Stats()},
	}}
	if _, n := scrape(t, metrics.Middleware(fake)); n != 2*perRule+sharedExtra+exactExtra {
		t.Errorf("a sync.Shared and a sync.Exact rule: %d series, want %d", n, 2*perRule+sharedExtra+exactExtra)
	}
	// One more info series (two algorithms and stores), no limit (5 and 2).
	got, n := scrape(t, metrics.Middleware(fake, metrics.WithGroup(metrics.AllRules)))
	if want := perGroup + 1 - 1 + sharedExtra + exactOnly; n != want {
		t.Errorf("a sync.Shared and a sync.Exact rule in one group: %d series, want %d", n, want)
	}
	if got[`shardlimit_decisions_total{limiter="all",outcome="allowed"}`] != 7 || got[`shardlimit_store_healthy{limiter="all"}`] != 1 {
		t.Errorf("the group: %v", got)
	}
}
