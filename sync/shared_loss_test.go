package sync

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestSharedLossKeepsTheOthersUnits: two nodes admit half a window's limit
// each and read each other's units; the store then loses the key's
// counters (the test deletes them, or the server restarts empty) and only
// node a decides from then on. a's flushes restore its own share but read
// nothing of b's, which b, idle, does not restore: a must keep counting the
// units of b it had read, so the window admits at most L in all (without
// that, a admitted b's share again: 26 of 20), and a reports the loss
// (SharedStats.LostUnits) and turns Degraded with ErrEvicting at once.
// When b decides again its first decision sees a's units as last read (the
// healthy lag: one unit here), and its flush restores its share.
func TestSharedLossKeepsTheOthersUnits(t *testing.T) {
	losses := []struct {
		name string
		lose func(t *testing.T, srv *redistest.Server, keys []string)
	}{
		{"deleted", func(t *testing.T, srv *redistest.Server, keys []string) {
			for _, k := range keys {
				if _, err := redistest.Do(srv.Addr, "DEL", k); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"restarted empty", func(t *testing.T, srv *redistest.Server, _ []string) {
			srv.Stop()
			srv.Start()
		}},
	}
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter, shardlimit.SlidingLog} {
		for _, tc := range losses {
			t.Run(alg.String()+"/"+tc.name, func(t *testing.T) { testLossKeepsOthers(t, alg, tc.lose) })
		}
	}
}

func testLossKeepsOthers(t *testing.T, alg shardlimit.Algorithm, lose func(*testing.T, *redistest.Server, []string)) {
	const limit, key = 20, "k"
	srv := redistest.StartServer(t)
	clock := shardlimit.NewManualClock(at(time.Second))
	ch := newChanges()
	cfg := SharedConfig{
		Config: shardlimit.Config{Algorithm: alg, Limit: limit, Window: time.Minute, Buckets: 4, Clock: clock},
		Prefix: redistest.Prefix(t),
		// The flushes are the test's; a restart must not make a node
		// Degraded by its failures: only the loss does.
		FlushTimeout: 5 * time.Second, FailAfter: 1000, EvictionCheck: -1,
	}
	if alg == shardlimit.FixedWindow {
		cfg.Buckets = 0
	}
	cfgA := cfg
	cfgA.OnStateChange = ch.record
	a := newShared(t, newClient(t, srv.Addr), cfgA)
	b := newShared(t, newClient(t, srv.Addr), cfg)
	admitted := 0
	step := func(s *Shared) bool {
		t.Helper()
		_ = s.Flush(ctxT(t, 5*time.Second)) // may fail once after the restart
		r := s.AllowN(key, clock.Now(), 1)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Allowed {
			admitted++
		}
		_ = s.Flush(ctxT(t, 5*time.Second))
		return r.Allowed
	}
	for range limit / 2 {
		step(a)
		step(b)
	}
	if admitted != limit {
		t.Fatalf("before the loss: %d admitted, want %d", admitted, limit)
	}
	mustFlush(t, a) // a reads b's last unit too
	if r := a.Peek(key, clock.Now(), 0); r.Remaining != 0 {
		t.Fatalf("a's view before the loss: %+v", r)
	}
	size := int64(time.Minute)
	if alg != shardlimit.FixedWindow {
		size /= 4
	}
	be := a.backend.(*RedisBackend)
	lose(t, srv, []string{be.CounterKey(key, clock.Now().UnixNano()/size)})
	for range 2 * limit {
		step(a)
	}
	if admitted > limit {
		t.Errorf("a alone after the loss: %d admitted in the window, want at most %d", admitted, limit)
	}
	st := a.SharedStats()
	if st.LostUnits < limit/2 || st.Losses == 0 {
		t.Errorf("a reports lost units %d in %d losses, want at least b's %d", st.LostUnits, st.Losses, limit/2)
	}
	if c := ch.wait(t, Degraded, 5*time.Second); !errors.Is(c.Err, ErrEvicting) {
		t.Errorf("change %+v: want an error wrapping ErrEvicting", c)
	} else {
		t.Logf("a: %v", c.Err)
	}
	for range 4 {
		step(b)
	}
	// b reads the store before it decides: a's whole share.
	if admitted > limit {
		t.Errorf("b back: %d admitted in the window, want at most %d", admitted, limit)
	}
	c := newClient(t, srv.Addr)
	if got := counters(t, c, a, []string{key}, clock.Now().UnixNano()/size)[0]; got != limit {
		t.Errorf("counter %d after both flushed again, want %d", got, limit)
	}
}

// TestSharedRealEvictionBound: two nodes share keys through a Redis whose
// maxmemory is full and whose policy (allkeys-random) evicts the
// limiters' counters as readily as anything else, while the test writes
// junk between every two decisions: counters are lost between nearly
// every write and the next read. The nodes take turns in bursts of 3
// decisions per key, each flushing before and after every decision, with
// FallbackLimit F = L/2. A node whose view lacks the other's units it never
// read (they were lost before it read them) decides as if they did not
// exist, so only the fallback bounds the window: the first loss a node
// reads turns it Degraded at once, and from then on it admits only while
// its own units plus the others' it read fit F. So node i ends a window
// with at most max(h_i, F) units, h_i those it admitted while Healthy, and
// the window holds at most the sum of those (the package doc on
// outages), computed here from what each node admitted; and never more
// than N*L.
func TestSharedRealEvictionBound(t *testing.T) {
	const limit, burst, windows = 20, 3, 4
	srv := redistest.StartServer(t, "--maxmemory-policy", "allkeys-random")
	c := newClient(t, srv.Addr)
	ctx := ctxT(t, time.Minute)
	used := func() int64 {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("INFO memory lacks used_memory")
		return 0
	}
	junk := strings.Repeat("x", 1024)
	j := 0
	flood := func(n int) {
		pipe := c.Pipeline()
		for range n {
			j++
			pipe.Set(ctx, fmt.Sprint("junk:", j), junk, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	flood(100)
	if err := c.ConfigSet(ctx, "maxmemory", fmt.Sprint(used()+256<<10)).Err(); err != nil {
		t.Fatal(err)
	}
	flood(400) // full: from here every write evicts

	clock := shardlimit.NewManualClock(at(time.Second))
	for _, alg := range []shardlimit.Algorithm{shardlimit.FixedWindow, shardlimit.SlidingCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			cfg := SharedConfig{
				Config:       shardlimit.Config{Algorithm: alg, Limit: limit, Window: time.Minute, Buckets: 4, Clock: clock},
				Prefix:       redistest.Prefix(t),
				FlushTimeout: 5 * time.Second, FailAfter: 1000, EvictionCheck: -1,
				FallbackLimit: limit / 2,
			}
			if alg == shardlimit.FixedWindow {
				cfg.Buckets = 0
			}
			nodes := []*Shared{newShared(t, newClient(t, srv.Addr), cfg), newShared(t, newClient(t, srv.Addr), cfg)}
			keys := []string{"a", "b", "c", "d"}
			for w := range windows {
				// Every decision of a pass is at one instant, a window
				// after the last pass's: its window holds this pass's
				// admissions (and, for the sliding counter, a weighted
				// share of the last pass's, which only makes it stricter).
				admitted := map[string]int{}
				healthy := [2]map[string]int{{}, {}} // per node
				for i := range 4 * limit / burst {
					s := nodes[i%2]
					for range burst {
						for _, k := range keys {
							_ = s.Flush(ctx)
							st := s.State()
							if r := s.AllowN(k, clock.Now(), 1); r.Err != nil {
								t.Fatal(r.Err)
							} else if r.Allowed {
								admitted[k]++
								if st == Healthy {
									healthy[i%2][k]++
								}
							}
							_ = s.Flush(ctx)
							flood(20)
						}
					}
				}
				t.Logf("pass %d: admitted %v, of which while healthy %v", w, admitted, healthy)
				for _, k := range keys {
					bound := max(healthy[0][k], limit/2) + max(healthy[1][k], limit/2)
					if admitted[k] > min(bound, 2*limit) {
						t.Errorf("pass %d, key %s: %d admitted in one window, want at most max(%d, F) + max(%d, F) = %d",
							w, k, admitted[k], healthy[0][k], healthy[1][k], bound)
					}
				}
				clock.Advance(2 * time.Minute) // a window that owes nothing to this one
			}
			var lost, losses, trips uint64
			for _, s := range nodes {
				st := s.SharedStats()
				lost, losses, trips = lost+st.LostUnits, losses+st.Losses, trips+st.Trips
			}
			t.Logf("%d units lost in %d reads; %d changes to Degraded", lost, losses, trips)
			if losses == 0 || trips == 0 {
				t.Errorf("no node saw a counter lost, or none turned Degraded (%d junk keys written)", j)
			}
		})
	}
}
