package sync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Eviction (issue 11, item 1): a Redis with maxmemory and an evicting
// policy, flooded with other keys, deletes the limiters' counters and
// state, which every node then reads as a fresh budget. The limiters find
// out from INFO, report it (a change to Degraded wrapping ErrEvicting, the
// Eviction stats) and decide as during an outage.

// evictingRedis starts a private Redis of 2 MB with the allkeys-lru policy.
func evictingRedis(t *testing.T) *redistest.Server {
	t.Helper()
	return redistest.StartServer(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
}

// flood writes 10 KB values under fresh keys to the Redis at addr, as fast
// as it takes them, until the returned stop is called (at most 60 s); stop
// returns how many it wrote.
func flood(t *testing.T, addr string) (stop func() int64) {
	t.Helper()
	c := newClient(t, addr)
	value := strings.Repeat("x", 10_000)
	done := make(chan struct{})
	var wrote atomic.Int64
	var wg stdsync.WaitGroup
	wg.Go(func() {
		deadline := time.Now().Add(time.Minute)
		for i := 0; time.Now().Before(deadline); {
			select {
			case <-done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			pipe := c.Pipeline()
			for range 50 {
				pipe.Set(ctx, fmt.Sprintf("flood:%d", i), value, 0)
				i++
			}
			_, _ = pipe.Exec(ctx)
			cancel()
			wrote.Add(50)
		}
	})
	var once stdsync.Once
	stop = func() int64 {
		once.Do(func() { close(done); wg.Wait() })
		return wrote.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}

// decision is one decision of the eviction runs.
type decision struct {
	at      time.Time
	node    int
	allowed bool
}

// drive makes each limiter decide key every gap, from now until stop is
// closed, and returns the decisions.
func drive(lims []shardlimit.Limiter, key string, gap time.Duration, stop <-chan struct{}) []decision {
	var mu stdsync.Mutex
	var out []decision
	var wg stdsync.WaitGroup
	for n, l := range lims {
		wg.Go(func() {
			tick := time.NewTicker(gap)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				now := time.Now()
				r := l.AllowN(key, now, 1)
				mu.Lock()
				out = append(out, decision{at: now, node: n, allowed: r.Allowed})
				mu.Unlock()
			}
		})
	}
	<-stop
	wg.Wait()
	return out
}

// mostPerWindow returns the most units admitted in one window of length w
// (aligned to Unix time) that starts at or after from.
func mostPerWindow(ds []decision, w time.Duration, from time.Time) int {
	per := map[int64]int{}
	first := (from.UnixNano() + int64(w) - 1) / int64(w)
	for _, d := range ds {
		if id := d.at.UnixNano() / int64(w); d.allowed && id >= first {
			per[id]++
		}
	}
	most := 0
	for _, n := range per {
		most = max(most, n)
	}
	return most
}

// evictionCase runs two nodes of one limiter kind against an evicting
// Redis under a flood, and returns the most units admitted in one window
// that starts after both nodes turned Degraded (or, with the eviction
// check off, after the flood began).
type evictionCase struct {
	name   string
	limit  int
	window time.Duration
	bound  int // per window while Degraded
	build  func(t *testing.T, addr string, check time.Duration, ch changes) shardlimit.Limiter
}

var evictionCases = []evictionCase{
	{
		// Exact falls back to its local limiter, which has recorded what
		// the node admitted through Redis: N x L per window.
		name: "exact", limit: 4, window: time.Second, bound: 2 * 4,
		build: func(t *testing.T, addr string, check time.Duration, ch changes) shardlimit.Limiter {
			return newExact(t, newClient(t, addr), ExactConfig{Config: fixedCfg(4, time.Second),
				EvictionCheck: check, ProbeInterval: 50 * time.Millisecond, OnStateChange: ch.record})
		},
	},
	{
		// Shared keeps deciding with its local counts under the stricter
		// FallbackLimit of L/N: N x L/N = L per window.
		name: "shared", limit: 4, window: time.Second, bound: 4,
		build: func(t *testing.T, addr string, check time.Duration, ch changes) shardlimit.Limiter {
			return newShared(t, newClient(t, addr), SharedConfig{
				Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 4, Window: time.Second, Clock: shardlimit.SystemClock()},
				FlushInterval: 50 * time.Millisecond, FallbackLimit: 2,
				EvictionCheck: check, OnStateChange: ch.record,
			})
		},
	},
}

func (ec evictionCase) run(t *testing.T, check time.Duration) (most int) {
	srv := evictingRedis(t)
	chs := []changes{newChanges(), newChanges()}
	lims := []shardlimit.Limiter{ec.build(t, srv.Addr, check, chs[0]), ec.build(t, srv.Addr, check, chs[1])}
	stopFlood := flood(t, srv.Addr)
	stop := make(chan struct{})
	var ds []decision
	done := make(chan struct{})
	go func() { ds = drive(lims, "k", 50*time.Millisecond, stop); close(done) }()
	from := time.Now()
	if check > 0 {
		for n, ch := range chs {
			c := ch.wait(t, Degraded, 10*time.Second)
			t.Logf("node %d: %v after the flood began: %v", n, time.Since(from).Round(time.Millisecond), c.Err)
			if !errors.Is(c.Err, ErrEvicting) {
				t.Errorf("node %d: state change %+v, want ErrEvicting", n, c)
			}
		}
		from = time.Now()
	}
	time.Sleep(3*ec.window + ec.window/2) // three whole windows from `from`
	close(stop)
	<-done
	wrote := stopFlood()
	for n, l := range lims {
		var ev Eviction
		var trips, recoveries uint64
		switch l := l.(type) {
		case *Exact:
			st := l.ExactStats()
			ev, trips, recoveries = st.Eviction, st.Trips, st.Recoveries
		case *Shared:
			st := l.SharedStats()
			ev, trips, recoveries = st.Eviction, st.Trips, st.Recoveries
		}
		t.Logf("node %d: eviction %+v, trips %d, recoveries %d", n, ev, trips, recoveries)
		if check > 0 && (ev.Policy != "allkeys-lru" || ev.Safe() || ev.Evicted == 0 || ev.Err != nil) {
			t.Errorf("node %d: eviction stats %+v", n, ev)
		}
		if check > 0 && recoveries != 0 {
			t.Errorf("node %d recovered while the flood went on", n)
		}
	}
	most = mostPerWindow(ds, ec.window, from)
	t.Logf("flood wrote %d keys; most admitted in one window: %d of limit %d (%.2fx)", wrote, most, ec.limit, float64(most)/float64(ec.limit))
	return most
}

// TestEvictionDetected: Exact and Shared, two nodes each, against a Redis
// of 2 MB with allkeys-lru flooded with other keys: every node turns
// Degraded with ErrEvicting within two checks, reports the policy and the
// evicted keys, and admits at most the outage bound per window from then
// on (Exact: N x L, its fallback having recorded its Redis admissions;
// Shared with FallbackLimit L/N: L). With SHARDLIMIT_EVICTION_COMPARE=1 it
// also measures the same runs with the eviction check off.
func TestEvictionDetected(t *testing.T) {
	for _, ec := range evictionCases {
		t.Run(ec.name, func(t *testing.T) {
			t.Parallel()
			if most := ec.run(t, 500*time.Millisecond); most > ec.bound {
				t.Errorf("%d admitted in one window while Degraded, above the bound %d", most, ec.bound)
			}
			if os.Getenv("SHARDLIMIT_EVICTION_COMPARE") == "1" {
				t.Run("unwatched", func(t *testing.T) { ec.run(t, -1) })
			}
		})
	}
}

// TestEvictionPolicyReported: a Redis that cannot evict is Safe; one that
// refuses INFO is reported once in Eviction.Err, and never asked again.
func TestEvictionPolicyReported(t *testing.T) {
	safe := redistest.StartServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "noeviction")
	e := newExact(t, newClient(t, safe.Addr), ExactConfig{Config: fixedCfg(5, time.Minute), EvictionCheck: 10 * time.Millisecond})
	s := newShared(t, newClient(t, safe.Addr), SharedConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 5, Window: time.Minute},
		FlushInterval: 5 * time.Millisecond, EvictionCheck: 10 * time.Millisecond})
	eventually(t, 10*time.Second, func() string {
		if ev := e.ExactStats().Eviction; ev.Policy != "noeviction" || !ev.Safe() || ev.Err != nil {
			return fmt.Sprintf("Exact: %+v", ev)
		}
		if ev := s.SharedStats().Eviction; ev.Policy != "noeviction" || !ev.Safe() || ev.Err != nil {
			return fmt.Sprintf("Shared: %+v", ev)
		}
		return ""
	})

	// INFO denied by an ACL, as some managed Redis services deny it.
	refused := redistest.StartServer(t)
	if _, err := redistest.Do(refused.Addr, "ACL", "SETUSER", "default", "-info"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, refused.Addr)
	e2 := newExact(t, c, ExactConfig{Config: fixedCfg(5, time.Minute), EvictionCheck: 10 * time.Millisecond})
	s2 := newShared(t, c, SharedConfig{Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 5, Window: time.Minute},
		FlushInterval: 5 * time.Millisecond, EvictionCheck: 10 * time.Millisecond})
	var rerr redis.Error
	eventually(t, 10*time.Second, func() string {
		if ev := e2.ExactStats().Eviction; !errors.Is(ev.Err, ErrRejected) || !errors.As(ev.Err, &rerr) {
			return fmt.Sprintf("Exact: %+v", ev)
		}
		if ev := s2.SharedStats().Eviction; !errors.Is(ev.Err, ErrRejected) || !errors.As(ev.Err, &rerr) {
			return fmt.Sprintf("Shared: %+v", ev)
		}
		return ""
	})
	t.Logf("INFO refused: %v", e2.ExactStats().Eviction.Err)
	time.Sleep(100 * time.Millisecond) // ten more check intervals
	// The ACL log counts the denied INFO commands.
	v, err := redistest.Do(refused.Addr, "ACL", "LOG")
	if err != nil {
		t.Fatal(err)
	}
	infos := int64(0)
	entries, _ := v.([]any)
	for _, en := range entries {
		kv, _ := en.([]any)
		var count int64
		object := ""
		for i := 0; i+1 < len(kv); i += 2 {
			switch kv[i] {
			case "count":
				count, _ = kv[i+1].(int64)
			case "object":
				object, _ = kv[i+1].(string)
			}
		}
		if object == "info" {
			infos += count
		}
	}
	t.Logf("%d INFO commands denied", infos)
	if infos != 1 || e2.State() != Healthy || s2.State() != Healthy {
		t.Errorf("%d INFO commands denied, states %v %v: want one for the client both limiters share, both healthy", infos, e2.State(), s2.State())
	}
}
