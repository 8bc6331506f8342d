package metrics_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
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
}
