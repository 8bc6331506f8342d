package main

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit/internal/mwtest"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Store faults and attacks against the demo (issue 11): its logs name the
// fault, once per episode, and stay within their budget whatever Redis
// does and whatever clients send.

// msgRe finds the message of a slog text line.
var msgRe = regexp.MustCompile(`msg="([^"]*)"|msg=(\S+)`)

// linesByMsg counts the lines of a slog text log by message.
func linesByMsg(log string) map[string]int {
	out := map[string]int{}
	for line := range strings.Lines(log) {
		if m := msgRe.FindStringSubmatch(line); m != nil {
			out[m[1]+m[2]]++
		}
	}
	return out
}

// waitFor polls the demo's stderr every 10 ms until it contains s, and
// returns how long that took; it fails the test after d.
func waitFor(t *testing.T, d *demo, s string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !strings.Contains(d.stderr.String(), s) {
		if time.Since(start) > within {
			t.Fatalf("no %q in the log within %v; stderr:\n%s", s, within, d.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestDemoLogsEviction: the demo with -redis against a Redis of 2 MB with
// allkeys-lru says at once that the policy can evict its counters, and,
// when the Redis is flooded with other keys, logs the eviction within 10 s,
// in one line however many rules share the Redis.
func TestDemoLogsEviction(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	d := startDemo(t, "-redis", srv.Addr)
	c := mwtest.NewClient(t, d.url, 1)
	mwtest.Check(t, "client-1 /foo", c.Get("/foo", "X-Client-ID", "client-1"), 200, nil)
	waitFor(t, d, `msg="redis can evict the limiters' counters: use maxmemory-policy noeviction" policy=allkeys-lru`, 10*time.Second)

	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	stop := make(chan struct{})
	var wg stdsync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	wg.Go(func() {
		value := strings.Repeat("x", 10_000)
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			rc.Set(ctx, fmt.Sprintf("flood:%d", i), value, 0)
			cancel()
		}
	})
	took := waitFor(t, d, `cause="evicting keys"`, 10*time.Second)
	t.Logf("eviction logged %v after the flood began", took)
	time.Sleep(3 * time.Second) // the flood goes on: the episode goes on
	if n := linesByMsg(d.stderr.String())["redis sync degraded: limits decided locally"]; n != 1 {
		t.Errorf("%d lines for one episode, want 1; stderr:\n%s", n, d.stderr)
	}
}

// TestDemoLogsBounded: with nothing listening at -redis (go-redis fails a
// dial for every command) and a client sending garbage on many
// connections, every message of the log stays within its budget, and the
// faults are still named.
func TestDemoLogsBounded(t *testing.T) {
	d := startDemo(t, "-redis", "127.0.0.1:1", "-flush", "5ms")
	c := mwtest.NewClient(t, d.url, 1)
	start := time.Now()
	addr := strings.TrimPrefix(d.url, "http://")
	for i := range 300 {
		if r := c.Get("/foo", "X-Client-ID", fmt.Sprintf("client-%d", i%3)); r.Status != 200 && r.Status != 429 {
			t.Fatalf("request %d: %+v", i, r)
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		_, _ = conn.Write([]byte("SECRET garbage \x00\x01 " + strings.Repeat("A", 100) + "\r\n\r\n"))
		buf := make([]byte, 512)
		_, _ = conn.Read(buf) // the 400
		conn.Close()
	}
	time.Sleep(500 * time.Millisecond) // the reconciler keeps failing meanwhile
	elapsed := time.Since(start)
	log := d.stderr.String()
	per := linesByMsg(log)
	t.Logf("after %v: lines by message %v", elapsed.Round(time.Millisecond), per)
	budget := logBurst + int(elapsed/logEvery) + 1
	for msg, n := range per {
		if n > budget {
			t.Errorf("%q: %d lines in %v, above the budget of %d", msg, n, elapsed, budget)
		}
	}
	for _, want := range []string{"redis not answering: deciding locally until it does", "redis sync degraded: limits decided locally", "redis client", "http server"} {
		if per[want] == 0 {
			t.Errorf("no %q line; stderr:\n%s", want, log)
		}
	}
	if strings.Contains(log, "SECRET") {
		t.Errorf("a client's bytes reached the log:\n%s", log)
	}
}
