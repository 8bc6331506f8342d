package sync

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedShutdownDuringSlowFlush: Shutdown's deadline also bounds a
// flush the reconciler has in flight to a store that does not answer.
func TestSharedShutdownDuringSlowFlush(t *testing.T) {
	const flushTimeout = 10 * time.Second
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	p.SetMode(redistest.Blackhole)
	// A frozen clock: on the system clock, a unit admitted in the last
	// 150 ms of a minute belongs to a window that is over by the final
	// flush, which then rightly drops it and has nothing to send (1 run
	// in 400 failed that way).
	s, err := NewShared(newClient(t, p.Addr), SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute, Clock: shardlimit.NewManualClock(at(time.Second))},
		Prefix:        redistest.Prefix(t),
		FlushInterval: time.Millisecond, FlushTimeout: flushTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Allow("k")
	// The reconciler has collected k's unit: its flush is waiting on the
	// black hole.
	eventually(t, 10*time.Second, func() string {
		if st := s.SharedStats(); st.Pending != 0 {
			return "k's unit not collected"
		}
		return ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.Shutdown(ctx)
	// A Shutdown that waited for the flush would return at its
	// FlushTimeout (the client's own timeouts are as long); how far past
	// its 100 ms deadline it returns is the machine's load.
	if d := time.Since(start); d >= flushTimeout {
		t.Fatalf("Shutdown took %v with a 100ms deadline: it waited for the flush", d)
	}
	if !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestSharedCloseIdempotent : Shared's Close
// sends the pending deltas once (one script call per key, MONITOR on a
// private Redis), then nothing from the library reaches Redis after Close
// returns, the goroutines are gone, and a second Close and decisions after
// Close answer without panic.
func TestSharedCloseIdempotent(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr)
	if err := c.Ping(ctxT(t, time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	base := goleak.IgnoreCurrent()
	s, err := NewShared(c, SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.SlidingCounter, Limit: 10, Window: time.Minute},
		Prefix:        "close:",
		FlushInterval: time.Minute, // only Close flushes
	})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int{"a": 3, "b": 1, "c": 2}
	now := time.Now()
	for k, n := range used {
		s.AllowN(k, now, n)
	}
	m := redistest.StartMonitor(t, srv.Addr)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	atClose := len(m.Sync(t))
	time.Sleep(200 * time.Millisecond) // anything the library still sent would show up by now
	cmds := m.Stop()
	// One EVALSHA for all keys (a single server takes any keys in one
	// call); on this fresh server it is answered NOSCRIPT and sent once
	// more as EVAL, which loads the script.
	evalsha, eval := map[string]int{}, map[string]int{}
	var calls, evals int
	for i, cmd := range cmds {
		if i >= atClose {
			t.Errorf("command after Close returned: %q", cmd)
		}
		switch strings.ToUpper(cmd[0]) {
		case "EVALSHA":
			calls++
			for _, k := range callKeys(cmd) {
				evalsha[k]++
			}
		case "EVAL":
			evals++
			for _, k := range callKeys(cmd) {
				eval[k]++
			}
		}
	}
	if calls != 1 || evals > 1 {
		t.Errorf("%d EVALSHA and %d EVAL, want 1 and at most 1", calls, evals)
	}
	for k := range used {
		// A sliding counter item names every bucket of the key's window.
		if evalsha[k] == 0 || evals == 1 && eval[k] != evalsha[k] {
			t.Errorf("key %s: named %d times by EVALSHA and %d by EVAL", k, evalsha[k], eval[k])
		}
	}
	if len(evalsha) != len(used) {
		t.Errorf("Close's flush sent %v, want the keys of %v", evalsha, used)
	}
	id := now.UnixNano() / int64(time.Minute/time.Duration(shardlimit.DefaultBuckets))
	for k, n := range used {
		if got := counters(t, c, s, []string{k}, id); got[0] != int64(n) {
			t.Errorf("counter of %s = %d, want %d", k, got[0], n)
		}
	}
	goleak.VerifyNone(t, base)
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	wantClosed(t, s.AllowN("a", now, 1).Err)
	if s.Allow("a") || s.AllowBytes([]byte("a")) {
		t.Error("allowed after Close")
	}
	if err := s.Flush(context.Background()); !errors.Is(err, shardlimit.ErrClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
}

// callKeys returns the limiter keys of the KEYS of an EVAL or EVALSHA
// command as MONITOR shows it.
func callKeys(cmd []string) []string {
	if len(cmd) < 3 {
		return nil
	}
	n, err := strconv.Atoi(cmd[2])
	if err != nil || len(cmd) < 3+n {
		return nil
	}
	var out []string
	for _, k := range cmd[3 : 3+n] {
		out = append(out, limiterKeyOf(k))
	}
	return out
}
