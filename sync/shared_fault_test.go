package sync

import (
	"context"
	"errors"
	"fmt"
	stdsync "sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Fault tests of Shared against private Redis servers: paused, killed and
// restarted empty, unreachable for many windows, closed under MONITOR, and
// the real-clock Retry-After promise.

// changes records a limiter's state changes for a test.
type changes chan StateChange

func newChanges() changes { return make(changes, 64) }

func (c changes) record(sc StateChange) {
	select {
	case c <- sc:
	default: // a test that stopped reading does not block the reconciler
	}
}

// wait returns the next change, failing the test if there is none within d
// or it is not a change to state to.
func (c changes) wait(t *testing.T, to State, d time.Duration) StateChange {
	t.Helper()
	select {
	case sc := <-c:
		if sc.To != to {
			t.Fatalf("state change %+v, want one to %v", sc, to)
		}
		return sc
	case <-time.After(d):
		t.Fatalf("no change to %v within %v", to, d)
	}
	return StateChange{}
}

// counters reads the Redis counters of keys for window or bucket id,
// failing the test on an error.
func counters(t *testing.T, c redis.Cmdable, s *Shared, keys []string, id int64) []int64 {
	t.Helper()
	out, err := readCounters(t, c, s, keys, id)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readCounters reads the Redis counters of keys for window or bucket id (0
// for a counter that does not exist). On a transport error it asks a
// Cluster client to reload its slot map before returning the error.
func readCounters(t *testing.T, c redis.Cmdable, s *Shared, keys []string, id int64) ([]int64, error) {
	t.Helper()
	return readRateCounters(t, c, s, keys, 0, id)
}

// readRateCounters is readCounters for the rate of window w of a limiter
// of several rates (0: of one rate).
func readRateCounters(t *testing.T, c redis.Cmdable, s *Shared, keys []string, w time.Duration, id int64) ([]int64, error) {
	t.Helper()
	be := s.backend.(*RedisBackend)
	ctx := ctxT(t, 10*time.Second)
	pipe := c.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGet(ctx, be.RateCounterKey(k, w, id), "t")
	}
	_, _ = pipe.Exec(ctx)
	out := make([]int64, len(keys))
	for i, cmd := range cmds {
		v, err := cmd.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			if cc, ok := c.(*redis.ClusterClient); ok {
				cc.ReloadState(ctx)
			}
			return nil, fmt.Errorf("HGET counter of %s: %w", keys[i], err)
		}
		out[i] = v
	}
	return out, nil
}

// eventually polls cond every 10 ms until it returns "" or d has passed,
// then fails the test with cond's last message.
func eventually(t *testing.T, d time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countSlow makes 10,000 decisions over 100 keys, sleeping 1 ms after every
// 100 so that the calls overlap several flushes, and returns how many took
// longer than 1 ms and the longest. It fails the test on any decision
// error or denial.
func countSlow(t *testing.T, s *Shared, now time.Time, used map[string]int) (slow int, longest time.Duration) {
	t.Helper()
	for i := range 10_000 {
		key := fmt.Sprintf("k%d", i%100)
		start := time.Now()
		r := s.AllowN(key, now, 1)
		d := time.Since(start)
		longest = max(longest, d)
		if d > time.Millisecond {
			slow++
		}
		if r.Err != nil || !r.Allowed {
			t.Fatalf("call %d: %+v", i, r)
		}
		used[key]++
		if i%100 == 99 {
			time.Sleep(time.Millisecond)
		}
	}
	return slow, longest
}

// TestSharedRedisPaused: a private Redis stopped (SIGSTOP: it accepts
// connections and commands, and runs them only when continued, as under
// CLIENT PAUSE) until the limiter has turned Degraded and 10,000 decisions
// were made, then continued. Decisions go on meanwhile and none waits for
// Redis (none takes the FlushTimeout a flush waits); the limiter turns
// Degraded and back once each, with OnStateChange; local limits hold
// meanwhile; afterwards every key's Redis counter equals what this node
// admitted (lost replies healed by the floor, nothing counted twice).
//
// The pause lasts until the test has seen what it waits for, not for a
// fixed time that a loaded machine may use up first, so the FlushTimeout
// can be long enough that no flush to a healthy Redis times out on a
// loaded machine (at 100 ms, two in a row did, and the limiter tripped a
// second time).
func TestSharedRedisPaused(t *testing.T) {
	const flushTimeout = time.Second
	srv := redistest.StartServer(t)
	ch := newChanges()
	now := at(time.Second)
	s := newShared(t, newClient(t, srv.Addr), SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 1 << 29, Window: time.Minute},
		FlushInterval: 10 * time.Millisecond, FlushTimeout: flushTimeout, FailAfter: 2,
		OnStateChange: ch.record,
	})
	used := map[string]int{}
	healthy, healthyMax := countSlow(t, s, now, used)

	pid := srv.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := stdsync.OnceFunc(func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(resume)
	// Decisions go on while Redis is stopped, so there are deltas to
	// flush: had every unit been flushed before the stop, no flush would
	// reach the stopped server and nothing would fail.
	driven := 0
	for deadline := time.Now().Add(30 * time.Second); s.State() != Degraded && time.Now().Before(deadline); {
		if s.AllowN("drive", now, 1).Allowed {
			driven++
		}
		time.Sleep(time.Millisecond)
	}
	used["drive"] = driven
	down := ch.wait(t, Degraded, 30*time.Second)
	if down.Err == nil || s.State() != Degraded {
		t.Errorf("change %+v, state %v", down, s.State())
	}
	paused, pausedMax := countSlow(t, s, now, used)
	if err := s.SetLimit("lim", 5); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 7 {
		if s.AllowN("lim", now, 1).Allowed {
			admitted++
		}
	}
	used["lim"] = admitted
	if admitted != 5 {
		t.Errorf("per-key limit 5 while paused: %d of 7 admitted", admitted)
	}
	if st := s.SharedStats(); st.State != Degraded || st.Trips != 1 || st.Recoveries != 0 {
		t.Errorf("stats while paused %+v", st)
	}
	resume()
	t.Logf("calls over 1ms among 10,000: healthy %d (longest %v), paused %d (longest %v)", healthy, healthyMax, paused, pausedMax)
	if pausedMax >= flushTimeout {
		t.Errorf("a decision took %v with Redis paused: it waited for a flush (timeout %v)", pausedMax, flushTimeout)
	}

	ch.wait(t, Healthy, 30*time.Second)
	keys := make([]string, 0, len(used))
	for k := range used {
		keys = append(keys, k)
	}
	id := now.UnixNano() / int64(time.Minute)
	c := newClient(t, srv.Addr)
	eventually(t, 30*time.Second, func() string {
		got := counters(t, c, s, keys, id)
		for i, k := range keys {
			if got[i] != int64(used[k]) {
				return fmt.Sprintf("counter of %s = %d, admitted %d; stats %+v", k, got[i], used[k], s.SharedStats())
			}
		}
		return ""
	})
	st := s.SharedStats()
	t.Logf("stats %+v", st)
	if st.Trips != 1 || st.Recoveries != 1 || st.State != Healthy {
		t.Errorf("stats %+v", st)
	}
}

// TestSharedRedisRestartedEmpty: a private Redis is killed mid-run and
// started again empty while two nodes keep deciding. No panic, decisions
// and local limits continue, both nodes turn Degraded and back; afterwards
// every key's counter is healed to the sum of what the two nodes sent for
// the live window, each node restoring its own share. With two rates, each
// rate's counters are.
func TestSharedRedisRestartedEmpty(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rates []shardlimit.Rate
	}{
		{"one rate", []shardlimit.Rate{{Limit: 1000, Window: time.Minute}}},
		{"two rates", []shardlimit.Rate{{Limit: 1000, Window: time.Minute}, {Limit: 5000, Window: time.Hour}}},
	} {
		t.Run(tc.name, func(t *testing.T) { testRestartedEmpty(t, tc.rates) })
	}
}

func testRestartedEmpty(t *testing.T, rates []shardlimit.Rate) {
	srv := redistest.StartServer(t)
	clock := shardlimit.NewManualClock(at(time.Second))
	now := clock.Now()
	cfg := SharedConfig{
		Config: shardlimit.Config{Algorithm: shardlimit.FixedWindow, Rates: rates, Clock: clock},
		Prefix: redistest.Prefix(t),
		// A server that is stopped refuses at once, so the timeout is not
		// what degrades the nodes; at 100 ms a loaded machine under -race
		// timed out the first flushes, whose units stayed unknown.
		FlushInterval: 10 * time.Millisecond, FlushTimeout: 5 * time.Second, FailAfter: 2,
	}
	if len(rates) == 1 {
		cfg.Limit, cfg.Window, cfg.Rates = rates[0].Limit, rates[0].Window, nil
	}
	chA, chB := newChanges(), newChanges()
	cfgA, cfgB := cfg, cfg
	cfgA.OnStateChange, cfgB.OnStateChange = chA.record, chB.record
	a := newShared(t, newClient(t, srv.Addr), cfgA)
	b := newShared(t, newClient(t, srv.Addr), cfgB)
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	sent := map[*Shared][]int64{a: make([]int64, len(keys)), b: make([]int64, len(keys))}
	round := func(units int) {
		for _, s := range []*Shared{a, b} {
			for i, k := range keys {
				if r := s.AllowN(k, now, units); r.Err != nil || !r.Allowed {
					t.Fatalf("AllowN(%s, %d): %+v", k, units, r)
				}
				sent[s][i] += int64(units)
			}
		}
	}
	// check returns what is wrong with the counters of every rate, for
	// the window of now, by want(key index, counter).
	c := newClient(t, srv.Addr)
	check := func(want func(i int, v int64) string) func() string {
		return func() string {
			for _, r := range rates {
				w := r.Window // names the rate's counters if there are several
				if len(rates) == 1 {
					w = 0
				}
				for i, v := range rateCounters(t, c, a, keys, w, now.UnixNano()/int64(r.Window)) {
					if msg := want(i, v); msg != "" {
						return fmt.Sprintf("rate %v: %s", r.Window, msg)
					}
				}
			}
			return ""
		}
	}
	round(3)
	eventually(t, 5*time.Second, check(func(i int, v int64) string {
		if v != 6 {
			return fmt.Sprintf("counter of %s = %d, want 6", keys[i], v)
		}
		return ""
	}))

	srv.Stop()
	round(2)
	chA.wait(t, Degraded, 3*time.Second)
	chB.wait(t, Degraded, 3*time.Second)
	round(1)
	// Local limits hold while Redis is away: a's view of "user:0" (its own
	// 6, plus b's 3 if a read them before the kill) leaves room for
	// r.Remaining units, and not one more.
	if r := a.Peek("user:0", now, 0); r.Remaining != 1000-6 && r.Remaining != 1000-9 {
		t.Errorf("a's view of user:0 while Redis is down: %+v", r)
	} else if r := a.AllowN("user:0", now, r.Remaining+1); r.Allowed {
		t.Errorf("AllowN over the limit while Redis is down: %+v", r)
	}

	srv.Start() // empty
	chA.wait(t, Healthy, 5*time.Second)
	chB.wait(t, Healthy, 5*time.Second)
	round(1) // mid-run: traffic goes on
	eventually(t, 5*time.Second, check(func(i int, v int64) string {
		// Each node healed its own share: the total is their sum, not
		// the larger one's.
		if sa, sb := sent[a][i], sent[b][i]; v != sa+sb {
			return fmt.Sprintf("counter of %s = %d, want %d + %d", keys[i], v, sa, sb)
		}
		return ""
	}))
	for _, s := range []*Shared{a, b} {
		if st := s.SharedStats(); st.Trips != 1 || st.Recoveries != 1 || st.State != Healthy {
			t.Errorf("stats %+v", st)
		}
	}
}

// TestSharedUnknownUnitsHealedWithoutTraffic: units whose flush timed out
// (MaybeApplied: never sent again, they could count twice) reach Redis
// through the next flush's floor even if their key sees no further
// decision, and the timeouts alone make the limiter Degraded.
func TestSharedUnknownUnitsHealedWithoutTraffic(t *testing.T) {
	p := redistest.StartProxy(t, redistest.RequireRedis(t))
	ch := newChanges()
	s := newShared(t, newClient(t, p.Addr), SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute},
		FlushInterval: 5 * time.Millisecond, FlushTimeout: 30 * time.Millisecond, FailAfter: 2,
		OnStateChange: ch.record,
	})
	if _, err := s.backend.Time(ctxT(t, time.Second)); err != nil { // connect first
		t.Fatal(err)
	}
	p.SetMode(redistest.Blackhole)
	now := at(time.Second)
	s.AllowN("k", now, 3)
	ch.wait(t, Degraded, 3*time.Second)
	if st := s.SharedStats(); st.UnknownUnits != 3 {
		t.Fatalf("stats %+v, want 3 unknown units", st)
	}
	p.SetMode(redistest.Pass)
	ch.wait(t, Healthy, 5*time.Second)
	c := sharedClient(t)
	eventually(t, 2*time.Second, func() string {
		if got := counters(t, c, s, []string{"k"}, now.UnixNano()/int64(time.Minute)); got[0] != 3 {
			return fmt.Sprintf("counter %d, want 3", got[0])
		}
		return ""
	})
}

// gatedBackend is a store that never answers: each Add reports that it
// started (on started), waits until the test sends on release (or ctx
// ends), then returns MaybeApplied, as a timeout would; Time always fails.
type gatedBackend struct {
	started chan struct{}
	release chan struct{}
	times   atomic.Int64
}

func (g *gatedBackend) Add(ctx context.Context, items []Item, out []ItemResult) []ItemResult {
	select {
	case g.started <- struct{}{}:
	case <-ctx.Done():
	}
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	out = out[:0]
	for range items {
		out = append(out, ItemResult{Outcome: MaybeApplied, Err: context.DeadlineExceeded})
	}
	return out
}

func (g *gatedBackend) Read(context.Context, string, int64, int, []int64) ([]int64, error) {
	return nil, errDown
}

func (g *gatedBackend) Time(context.Context) (time.Time, error) {
	g.times.Add(1)
	return time.Time{}, errDown
}

// TestSharedProbesAfterAFailedFlush: a flush fails and its units' bucket
// ends before the next one, so nothing is left to send; the reconciler
// still probes the store and becomes Degraded. The store is gated, so the
// bucket ends while the one failing flush is in flight, whatever the
// scheduling.
func TestSharedProbesAfterAFailedFlush(t *testing.T) {
	gb := &gatedBackend{started: make(chan struct{}), release: make(chan struct{})}
	clock := shardlimit.NewManualClock(at(time.Second))
	ch := newChanges()
	s := newShared(t, nil, SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 10, Window: time.Minute, Clock: clock},
		Backend:       gb,
		FlushInterval: 5 * time.Millisecond, FlushTimeout: 10 * time.Second, FailAfter: 3,
		OnStateChange: ch.record,
	})
	s.AllowN("k", clock.Now(), 1)
	select {
	case <-gb.started: // the reconciler's first flush holds k's unit
	case <-time.After(10 * time.Second):
		t.Fatal("no flush within 10s")
	}
	clock.Advance(2 * time.Minute) // the unit's window is over: dropped from now on
	gb.release <- struct{}{}       // that flush fails
	ch.wait(t, Degraded, 10*time.Second)
	if st := s.SharedStats(); st.FailedFlushes != 1 || st.Pending != 0 || gb.times.Load() < 2 {
		t.Errorf("stats %+v, %d probes: want one failed flush, then the probes to have tripped it", st, gb.times.Load())
	}
}

// TestOutageShared checks Shared through an outage (fixed
// window, limit 5, W = 60 s, flushes every 100 ms): ten windows of outage
// (a ManualClock moves the limiter; the store is a private Redis, stopped)
// with 1,000 new keys per window. Pending keys never exceed one window's
// 1,000; the units of every window that ended are dropped and counted, never
// written. When Redis is back (empty), within two successful flushes
// every key of the current window has a Redis counter, with a TTL, equal to
// this node's local count, and no key of an older window exists.
func TestOutageShared(t *testing.T) {
	srv := redistest.StartServer(t)
	const window, perWindow = time.Minute, 1000
	clock := shardlimit.NewManualClock(T0)
	interval := 100 * time.Millisecond
	s := newShared(t, newClient(t, srv.Addr), SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 5, Window: window, Clock: clock},
		FlushInterval: interval,
	})
	srv.Stop()
	units := func(i int) int { return 1 + i%5 }
	perWindowUnits := 0
	for i := range perWindow {
		perWindowUnits += units(i)
	}
	var keys []string
	for w := range 10 {
		clock.Set(T0.Add(time.Duration(w)*window + time.Second))
		now := clock.Now()
		keys = keys[:0]
		for i := range perWindow {
			k := fmt.Sprintf("w%d:u%d", w, i)
			keys = append(keys, k)
			if r := s.AllowN(k, now, units(i)); !r.Allowed {
				t.Fatalf("window %d key %s: %+v", w, k, r)
			}
		}
		if err := s.Flush(ctxT(t, 5*time.Second)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("flush to a stopped Redis: %v", err)
		}
		st := s.SharedStats()
		if st.Pending > perWindow {
			t.Fatalf("window %d: %d keys pending, more than one window's %d", w, st.Pending, perWindow)
		}
		if want := uint64(w * perWindowUnits); st.DroppedUnits != want {
			t.Fatalf("window %d: dropped %d units, want %d (the ended windows'); stats %+v", w, st.DroppedUnits, want, st)
		}
	}
	if st := s.SharedStats(); st.State != Degraded || st.UnknownUnits != 0 {
		t.Fatalf("stats after the outage %+v", st)
	}

	// How fast the reconciler gets to Redis after it is back is its
	// back-off (at most max(FlushInterval, 1 s) between attempts) and the
	// client's redial, which a loaded machine stretches: the verdict is
	// how many successful flushes it took, the time is logged.
	succeeded := func(st SharedStats) uint64 { return st.Flushes - st.FailedFlushes }
	before := succeeded(s.SharedStats())
	srv.Start()
	start := time.Now()
	c := newClient(t, srv.Addr)
	id := clock.Now().UnixNano() / int64(window)
	eventually(t, 30*time.Second, func() string {
		for i, v := range counters(t, c, s, keys, id) {
			if v != int64(units(i)) {
				return fmt.Sprintf("counter of %s = %d, want %d", keys[i], v, units(i))
			}
		}
		return ""
	})
	st := s.SharedStats()
	t.Logf("counters right %v after Redis came back, after %d successful flushes; stats %+v", time.Since(start), succeeded(st)-before, st)
	if n := succeeded(st) - before; n > 2 {
		t.Errorf("%d successful flushes to heal the counters, want at most 2", n)
	}
	ctx := ctxT(t, 10*time.Second)
	n := 0
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
		if ttl, err := c.PTTL(ctx, iter.Val()).Result(); err != nil || ttl <= 0 || ttl > 2*window+2*time.Second {
			t.Fatalf("key %s: TTL %v, %v", iter.Val(), ttl, err)
		}
	}
	if iter.Err() != nil || n != perWindow {
		t.Fatalf("Redis holds %d keys (%v), want the current window's %d", n, iter.Err(), perWindow)
	}
}
