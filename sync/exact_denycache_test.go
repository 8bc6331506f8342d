package sync

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// denyConfigs are the configurations of the deny cache tests: every
// algorithm of Exact, and two rates whose binding rate is not the one
// that waits longest.
var denyConfigs = []struct {
	name string
	cfg  shardlimit.Config
}{
	{"fixed", fixedCfg(3, time.Minute)},
	{"counter", counterCfg(3, time.Minute, 6)},
	{"gcra", gcraCfg(3, time.Minute)},
	{"gcra-two-rates", ratesCfg(shardlimit.GCRA, 0, rate(3, time.Minute), rate(4, time.Hour))},
	{"fixed-two-rates", ratesCfg(shardlimit.FixedWindow, 0, rate(3, time.Minute), rate(3, time.Hour))},
}

// scriptCalls returns the count of EVALSHA and EVAL calls the Redis at
// addr ran (INFO commandstats).
func scriptCalls(t testing.TB, addr string) int64 {
	t.Helper()
	sha, _ := commandStats(t, addr, "evalsha")
	eval, _ := commandStats(t, addr, "eval")
	return sha + eval
}

// TestExactDenyCacheFloodSendsNothing: once the store denied a unit of a
// key until an instant, a flood of requests for it before that instant
// sends no command to Redis (INFO commandstats of a private server), and
// each is answered with the Result the store gives at its instant (asked
// after the flood, by a limiter without the cache, with Peek, which
// writes nothing); the first request at the instant goes to the store.
func TestExactDenyCacheFloodSendsNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newClient(t, srv.Addr)
	for _, tc := range denyConfigs {
		t.Run(tc.name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			e := newExact(t, c, ExactConfig{Config: tc.cfg, Prefix: prefix, EvictionCheck: -1})
			e.callerTime = true
			for i := range 3 {
				if r := e.AllowN("k", at(time.Duration(i)*time.Second), 1); !r.Allowed {
					t.Fatalf("unit %d: %+v", i, r)
				}
			}
			first := e.AllowN("k", at(3*time.Second), 1)
			if first.Allowed || first.RetryAfter <= 0 || first.RetryAfter == shardlimit.Never {
				t.Fatalf("the fourth unit: %+v", first)
			}
			until := e.ExactStats().Calls // every call so far went to the store
			before := scriptCalls(t, srv.Addr)
			const flood = 1000
			step := first.RetryAfter / flood
			got := make([]shardlimit.Result, flood)
			for i := range got {
				got[i] = e.AllowN("k", at(3*time.Second+time.Duration(i)*step), 1)
			}
			if sent := scriptCalls(t, srv.Addr) - before; sent != 0 {
				t.Fatalf("%d script calls during a flood of %d on a denied key", sent, flood)
			}
			st := e.ExactStats()
			if st.Calls != until || st.DenyCacheHits < flood-1 {
				t.Fatalf("after the flood: Calls %d (was %d), DenyCacheHits %d", st.Calls, until, st.DenyCacheHits)
			}
			// What the store says at each instant of the flood.
			ref := newExact(t, c, ExactConfig{Config: tc.cfg, Prefix: prefix, EvictionCheck: -1, DenyCacheKeys: -1})
			ref.callerTime = true
			for i := 0; i < flood; i += 37 {
				if want := ref.Peek("k", at(3*time.Second+time.Duration(i)*step), 1); got[i] != want {
					t.Fatalf("request %d of the flood: cached %+v, the store %+v", i, got[i], want)
				}
			}
			// The binding rate's wait ends first; its instant goes to the store.
			r := e.AllowN("k", at(3*time.Second+first.RetryAfter), 1)
			if e.ExactStats().Calls == until {
				t.Fatalf("the request at the denial's RetryAfter did not reach the store: %+v", r)
			}
			if len(tc.cfg.Rates) == 0 && !r.Allowed {
				t.Fatalf("one unit at the denial's RetryAfter: %+v", r)
			}
		})
	}
}

// TestExactDenyCacheOnlyOneUnit: a denial of more than one unit is not
// cached (one unit may still fit), and requests of more than one unit
// always go to the store, which admits what fits.
func TestExactDenyCacheOnlyOneUnit(t *testing.T) {
	e := replay(t, fixedCfg(3, time.Minute))
	if r := e.AllowN("k", at(0), 2); !r.Allowed {
		t.Fatalf("2 of 3: %+v", r)
	}
	if r := e.AllowN("k", at(time.Second), 2); r.Allowed {
		t.Fatalf("4 of 3: %+v", r)
	}
	if r := e.AllowN("k", at(2*time.Second), 1); !r.Allowed {
		t.Fatalf("a unit after a denial of 2, with 1 left: %+v", r)
	}
	if r := e.AllowN("k", at(3*time.Second), 1); r.Allowed {
		t.Fatalf("4 of 3: %+v", r)
	}
	calls := e.ExactStats().Calls
	if r := e.AllowN("k", at(4*time.Second), 2); r.Allowed || e.ExactStats().Calls != calls+1 {
		t.Fatalf("2 units on a key denied for 1: %+v, calls %d -> %d", r, calls, e.ExactStats().Calls)
	}
	if r := e.AllowN("k", at(5*time.Second), 1); r.Allowed || e.ExactStats().Calls != calls+1 {
		t.Fatalf("1 unit on a key denied for 1: %+v, calls %d -> %d", r, calls, e.ExactStats().Calls)
	}
	if st := e.ExactStats(); st.DenyCacheHits != 1 {
		t.Fatalf("DenyCacheHits %d, want 1", st.DenyCacheHits)
	}
}

// TestExactDenyCacheInvalidated: units given back (a refund through
// Settle, Reset) and limits changed in this process end a key's cached
// denial at once: the next request goes to the store and is admitted.
func TestExactDenyCacheInvalidated(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(e *Exact) error
	}{
		{"refund", func(e *Exact) error { return e.Settle("k", at(0), -1) }},
		{"reset", func(e *Exact) error { return e.Reset("k") }},
		{"set-limit", func(e *Exact) error { return e.SetLimit("k", 4) }},
		{"set-default-limit", func(e *Exact) error { return e.SetDefaultLimit(4) }},
		{"clear-limit", func(e *Exact) error { return e.ClearLimit("k") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := replay(t, fixedCfg(3, time.Minute))
			if tc.name == "clear-limit" {
				if err := e.SetLimit("k", 2); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; e.AllowN("k", at(time.Duration(i)*time.Second), 1).Allowed; i++ {
				if i > 3 {
					t.Fatal("more than the limit admitted")
				}
			}
			if r := e.AllowN("k", at(10*time.Second), 1); r.Allowed || e.ExactStats().DenyCacheHits != 1 {
				t.Fatalf("not denied by the cache: %+v, %+v", r, e.ExactStats())
			}
			if err := tc.change(e); err != nil {
				t.Fatal(err)
			}
			calls := e.ExactStats().Calls
			if r := e.AllowN("k", at(11*time.Second), 1); !r.Allowed || e.ExactStats().Calls != calls+1 {
				t.Fatalf("after the change: %+v, calls %d -> %d", r, calls, e.ExactStats().Calls)
			}
		})
	}
}

// TestExactDenyCacheOtherProcessReset: a Reset by another process does
// not reach this process's cache, which keeps denying until the instant
// the store named (the strict side the docs describe), then asks the
// store again.
func TestExactDenyCacheOtherProcessReset(t *testing.T) {
	c := sharedClient(t)
	prefix := redistest.Prefix(t)
	a := newExact(t, c, ExactConfig{Config: fixedCfg(1, time.Minute), Prefix: prefix})
	b := newExact(t, c, ExactConfig{Config: fixedCfg(1, time.Minute), Prefix: prefix})
	a.callerTime, b.callerTime = true, true
	if !a.AllowN("k", at(0), 1).Allowed {
		t.Fatal("the first unit denied")
	}
	denied := b.AllowN("k", at(time.Second), 1)
	if denied.Allowed || denied.RetryAfter != 59*time.Second {
		t.Fatalf("the second unit: %+v", denied)
	}
	if err := a.Reset("k"); err != nil {
		t.Fatal(err)
	}
	if r := b.AllowN("k", at(2*time.Second), 1); r.Allowed || r.RetryAfter != 58*time.Second {
		t.Fatalf("b after a's Reset, before the instant: %+v (want the cached denial)", r)
	}
	if !a.AllowN("k", at(3*time.Second), 1).Allowed {
		t.Fatal("a after its Reset: denied")
	}
	if r := b.AllowN("k", at(time.Minute), 1); !r.Allowed {
		t.Fatalf("b in the next window: %+v", r)
	}
}

// TestExactDenyCacheWaitAndReserve: ReserveN on a key the cache denies
// reports the store's wait; WaitN sleeps (on the limiter's clock) until
// the instant the store named and is admitted there, without spinning on
// the cache.
func TestExactDenyCacheWaitAndReserve(t *testing.T) {
	clock := shardlimit.NewManualClock(at(0))
	cfg := fixedCfg(1, time.Minute)
	cfg.Clock = clock
	e := newExact(t, sharedClient(t), ExactConfig{Config: cfg})
	e.callerTime = true
	if !e.Allow("k") {
		t.Fatal("the first unit denied")
	}
	clock.Advance(time.Second)
	if e.Allow("k") {
		t.Fatal("the second unit admitted")
	}
	clock.Advance(time.Second)
	res := e.ReserveN("k", clock.Now(), 1)
	if res.OK() || res.DelayFrom(clock.Now()) != 58*time.Second || e.ExactStats().DenyCacheHits != 1 {
		t.Fatalf("reservation on the cached denial: ok %v delay %v, %+v", res.OK(), res.DelayFrom(clock.Now()), e.ExactStats())
	}
	calls := e.ExactStats().Calls
	done := make(chan error, 1)
	go func() { done <- e.Wait(context.Background(), "k") }()
	deadline := time.Now().Add(10 * time.Second)
	for clock.Sleepers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never slept")
		}
		time.Sleep(time.Millisecond)
	}
	if st := e.ExactStats(); st.Calls != calls {
		t.Fatalf("the waiter's first try reached the store: %+v", st)
	}
	clock.Set(at(time.Minute))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not admitted at the instant the store named")
	}
	if st := e.ExactStats(); st.Calls != calls+1 {
		t.Fatalf("the wait made %d calls, want 1", st.Calls-calls)
	}
}

// TestExactDenyCacheRace runs decisions, refunds and limit changes of a
// few keys at once (for -race), and checks that the store and the cache
// together never admitted more than the limit in a window.
func TestExactDenyCacheRace(t *testing.T) {
	e := newExact(t, sharedClient(t), ExactConfig{Config: fixedCfg(5, time.Hour), DenyCacheKeys: 2})
	var wg sync.WaitGroup
	admitted := make([]int, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				key := fmt.Sprintf("k%d", i%3)
				if e.Allow(key) {
					admitted[g]++
				}
				if i%50 == 49 {
					_ = e.SetDefaultLimit(5)
					_ = e.SetLimit(key, 5)
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range admitted {
		total += n
	}
	if total > 15 {
		t.Fatalf("%d admitted for 3 keys of 5 per hour", total)
	}
	if st := e.ExactStats(); st.DenyCacheHits == 0 || st.PolicyDecisions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestExactDenyCacheConfig: DenyCacheKeys out of range is refused; a
// negative count turns the cache off.
func TestExactDenyCacheConfig(t *testing.T) {
	c := sharedClient(t)
	if _, err := NewExact(c, ExactConfig{Config: fixedCfg(1, time.Minute), DenyCacheKeys: maxDenyCacheKeys + 1}); err == nil {
		t.Fatal("DenyCacheKeys above the maximum accepted")
	}
	e := replayOff(t, fixedCfg(1, time.Minute))
	e.AllowN("k", at(0), 1)
	for i := range 3 {
		if e.AllowN("k", at(time.Duration(i+1)*time.Second), 1).Allowed {
			t.Fatal("admitted over the limit")
		}
	}
	if st := e.ExactStats(); st.DenyCacheHits != 0 || st.Calls != 4 {
		t.Fatalf("cache off: %+v", st)
	}
}

// replayOff is replay without the deny cache.
func replayOff(t testing.TB, cfg shardlimit.Config) *Exact {
	t.Helper()
	e := newExact(t, sharedClient(t), ExactConfig{Config: cfg, DenyCacheKeys: -1})
	e.callerTime = true
	return e
}

// TestExactDenyCacheMatchesStore replays random sequences (mostly one
// unit, instants a little apart, now and then two units, a peek, a
// refund of the key's last grant, a step back in time) through a
// limiter with the deny cache and one without, each on a prefix of its
// own: every Result agrees, and the cache answered a good share of them.
func TestExactDenyCacheMatchesStore(t *testing.T) {
	for _, tc := range denyConfigs {
		t.Run(tc.name, func(t *testing.T) {
			c := sharedClient(t)
			e := newExact(t, persistingClient{c}, ExactConfig{Config: tc.cfg, Prefix: redistest.Prefix(t) + "cache:"})
			ref := newExact(t, persistingClient{c}, ExactConfig{Config: tc.cfg, Prefix: redistest.Prefix(t) + "ref:", DenyCacheKeys: -1})
			e.callerTime, ref.callerTime = true, true
			for _, l := range []*Exact{e, ref} {
				t.Cleanup(func() {
					for _, k := range []string{"k0", "k1", "k2"} {
						_ = l.Reset(k)
					}
				})
			}
			for seed := range uint64(4) {
				matchStore(t, e, ref, rand.New(rand.NewPCG(seed, uint64(len(tc.name)))), seed%2 == 0)
			}
			if st := e.ExactStats(); st.DenyCacheHits < 4*matchSteps/10 || st.Errors != 0 || st.PolicyDecisions != 0 {
				t.Fatalf("the cache answered %d of %d decisions: %+v", st.DenyCacheHits, 4*matchSteps, st)
			}
			if st := ref.ExactStats(); st.Errors != 0 || st.PolicyDecisions != 0 {
				t.Fatalf("the limiter without the cache: %+v", st)
			}
		})
	}
}

// matchSteps is the length of one sequence of matchStore.
const matchSteps = 600

// matchStore runs one random sequence of TestExactDenyCacheMatchesStore
// on keys k0-k2, from a minute after the latest instant the keys have
// seen, through e (with the cache) and ref (without): with steps back in
// time if back, else with refunds.
func matchStore(t *testing.T, e, ref *Exact, rng *rand.Rand, back bool) {
	t.Helper()
	now := time.UnixMicro(max(e.latest.Load(), ref.latest.Load())).Add(time.Minute)
	var granted [3][]time.Time
	for i := range matchSteps {
		k := rng.IntN(3)
		key := fmt.Sprintf("k%d", k)
		switch p := rng.IntN(20); {
		case p < 11:
			now = now.Add(time.Duration(rng.Int64N(2000)) * time.Millisecond)
		case p < 13 && back:
			// Back, but not across a minute's start: the journal of a fixed
			// window takes a decision in an earlier window than the store's
			// latest for a loss (either limiter alike).
			into := now.Sub(now.Truncate(time.Minute))
			now = now.Add(-min(into, time.Duration(rng.Int64N(3000))*time.Millisecond))
		case p < 14 && !back && len(granted[k]) > 0:
			g := granted[k][len(granted[k])-1]
			if err, err2 := e.Settle(key, g, -1), ref.Settle(key, g, -1); err != nil || err2 != nil {
				t.Fatal(err, err2)
			}
			continue
		}
		n := []int{1, 1, 1, 1, 1, 1, 2, 0}[rng.IntN(8)]
		var got, want shardlimit.Result
		if rng.IntN(6) == 0 {
			got, want = e.Peek(key, now, n), ref.Peek(key, now, n)
		} else {
			got, want = e.AllowN(key, now, n), ref.AllowN(key, now, n)
			if want.Allowed && n > 0 {
				granted[k] = append(granted[k], now)
			}
		}
		if got != want {
			t.Fatalf("step %d: %s at T0+%v n=%d: cached %+v, the store %+v", i, key, now.Sub(T0), n, got, want)
		}
	}
}
