package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit/internal/redistest"
)

// fault is one row of the report: a store fault injected from outside.
type fault struct {
	id    string
	name  string
	proxy bool // the nodes reach Redis through the stall proxy
	// inject runs the fault, starting now; it returns when the fault ends
	// (the store answers normally again), with a note for the report.
	inject func(ctx context.Context, e *env) (string, error)
}

// env is what a fault acts on.
type env struct {
	p   params
	srv *server
	px  *redistest.Proxy // nil unless the fault's nodes use it
}

var faults = []fault{
	{id: "evict", name: "eviction flood (allkeys-lru, 2 MB)", inject: evictionFlood},
	{id: "kill", name: "kill, empty restart", inject: killRestart},
	{id: "stall", name: "proxy stalled mid-reply", proxy: true, inject: stallProxy},
}

// evictionFlood sets maxmemory 2mb with allkeys-lru and writes junk keys
// of 1 KiB (about 5 MB/s) for p.flood; it ends by lifting maxmemory, which
// stops the eviction.
func evictionFlood(ctx context.Context, e *env) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: e.srv.addr, MaxRetries: -1})
	defer c.Close()
	before, _ := evictedKeys(ctx, c)
	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		return "", err
	}
	if err := c.ConfigSet(ctx, "maxmemory", "2mb").Err(); err != nil {
		return "", err
	}
	junk := strings.Repeat("j", 1024)
	end := time.Now().Add(e.p.flood)
	written := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var werr error
	for time.Now().Before(end) && ctx.Err() == nil {
		<-tick.C
		pipe := c.Pipeline()
		for range 50 {
			pipe.Set(ctx, "junk:"+strconv.Itoa(written), junk, 0)
			written++
		}
		if _, err := pipe.Exec(ctx); err != nil && werr == nil {
			werr = err
		}
	}
	if err := c.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
		return "", err
	}
	after, _ := evictedKeys(context.Background(), c)
	note := fmt.Sprintf("%d junk keys written in %v, %d keys evicted", written, e.p.flood, after-before)
	if werr != nil {
		note += "; writer error: " + werr.Error()
	}
	return note, nil
}

// evictedKeys reads INFO stats evicted_keys.
func evictedKeys(ctx context.Context, c *redis.Client) (int64, error) {
	s, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, "evicted_keys:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no evicted_keys in INFO")
}

// killRestart sends SIGKILL to the redis-server and starts an empty one
// on the same port p.down later; it ends when the new one answers PING.
func killRestart(ctx context.Context, e *env) (string, error) {
	e.srv.kill()
	t0 := time.Now()
	if !sleepUntil(ctx, t0.Add(e.p.down)) {
		return "", ctx.Err()
	}
	if err := e.srv.restart(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("down for %v (restart answered PING)", time.Since(t0).Round(time.Millisecond)), nil
}

// stallProxy holds every reply at the proxy, cutting the first one of
// each connection in half (redistest.HoldReplies), for p.stall.
func stallProxy(ctx context.Context, e *env) (string, error) {
	e.px.SetMode(redistest.HoldReplies)
	ok := sleepUntil(ctx, time.Now().Add(e.p.stall))
	e.px.SetMode(redistest.Pass)
	if !ok {
		return "", ctx.Err()
	}
	return fmt.Sprintf("replies held for %v", e.p.stall), nil
}
