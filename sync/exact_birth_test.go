package sync

import (
	"context"
	"errors"
	"fmt"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// birthPair returns two Exact limiters of cfg on one private
// redis-server, deciding at the test's instants; the eviction check and
// the health interval are an hour, so a loss a reply proves holds the
// limiter by its policy for the whole test (two EvictionChecks). Each
// returned func gives the causes of the limiter's changes to Degraded.
func birthPair(t *testing.T, cfgOf func() ExactConfig) (a, b *Exact, causes [2]func() []error, del func(key string)) {
	t.Helper()
	srv := redistest.StartServer(t)
	prefix := redistest.Prefix(t)
	var es [2]*Exact
	for i := range es {
		var mu stdsync.Mutex
		var errs []error
		cfg := cfgOf()
		cfg.Prefix, cfg.Timeout = prefix, 300*time.Millisecond
		cfg.EvictionCheck, cfg.HealthInterval = time.Hour, time.Hour
		cfg.OnStateChange = func(c StateChange) {
			if c.To == Degraded {
				mu.Lock()
				errs = append(errs, c.Err)
				mu.Unlock()
			}
		}
		es[i] = newExact(t, newClient(t, srv.Addr), cfg)
		es[i].callerTime = true
		causes[i] = func() []error {
			mu.Lock()
			defer mu.Unlock()
			return append([]error(nil), errs...)
		}
	}
	c := newClient(t, srv.Addr)
	del = func(key string) {
		t.Helper()
		if err := c.Del(context.Background(), es[0].StateKeys(key)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return es[0], es[1], causes, del
}

// TestExactLossSeenWithoutUnits: process a is granted the whole limit of
// a key, process b only denied, so b has no units in the store. The
// store then loses the key's state (its keys deleted, as an eviction
// does; INFO shows nothing). b's next call proves the loss: its reply
// shows the state born again before it could expire. So b decides by its
// policy, whose fallback had recorded the cluster's usage the denials
// told, and the window holds L (before, the store granted b the whole
// limit again from empty state: 2 L). The loss counts in Losses (no units
// of b's: LostUnits 0), and b turns Degraded with ErrEvicting. Every
// algorithm, one rate and two. (b has no deny cache: with one, b denies
// from its cache until the instant the denials named, the strict side,
// and calls the store only then.)
func TestExactLossSeenWithoutUnits(t *testing.T) {
	for _, c := range outageConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each has its own redis-server; the verdicts are counts
			a, b, causes, del := birthPair(t, func() ExactConfig { return ExactConfig{Config: c.cfg, DenyCacheKeys: -1} })
			const key = "user"
			now := at(time.Second)
			L := c.lims[0]
			if got := send(t, a, key, now, L); got != L {
				t.Fatalf("a: Redis admitted %d of %d", got, L)
			}
			if got := send(t, b, key, now, 3); got != 0 {
				t.Fatalf("b: Redis admitted %d of 3 past the limit", got)
			}
			if st := b.ExactStats(); st.JournalKeys != 0 || st.Losses != 0 {
				t.Fatalf("b before the loss: %+v", st)
			}
			del(key)
			got := send(t, b, key, now.Add(time.Millisecond), L)
			st := b.ExactStats()
			t.Logf("after the loss b admitted %d (L = %d); %+v", got, L, st)
			if L+got > L {
				t.Errorf("%d admitted in the window, more than L = %d", L+got, L)
			}
			if st.Losses == 0 || st.LostUnits != 0 || st.State != Degraded {
				t.Errorf("the loss is not counted, or counted as b's units: %+v", st)
			}
			waitFor(t, func() bool { return len(causes[1]()) > 0 })
			if errs := causes[1](); !errors.Is(errs[0], ErrEvicting) {
				t.Errorf("b Degraded by %v, want ErrEvicting", errs[0])
			}
		})
	}
}

// TestExactBirthNotALoss: a state born again after it expired, or after
// another process's Reset, is no loss: the process that had seen the old
// state is granted the whole limit by the store, stays Healthy and counts
// no loss. (Deleting the keys stands for their TTL's expiry: the
// scripts decide at the test's instants, which the TTLs do not follow.
// No deny cache: another process's Reset reaches it only at the instant
// its denial named, see TestExactDenyCacheOtherProcessReset.)
// Every algorithm, one rate and two.
func TestExactBirthNotALoss(t *testing.T) {
	for _, c := range outageConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each has its own redis-server; the verdicts are counts
			a, b, _, del := birthPair(t, func() ExactConfig { return ExactConfig{Config: c.cfg, DenyCacheKeys: -1} })
			L := c.lims[0]
			longest := time.Duration(0)
			for _, r := range c.cfg.Rates {
				longest = max(longest, r.Window)
			}
			check := func(what, key string, now time.Time) {
				t.Helper()
				got := send(t, b, key, now, L+3)
				if st := b.ExactStats(); got != L || st.Losses != 0 || st.PolicyDecisions != 0 || st.State != Healthy {
					t.Fatalf("%s: %d admitted, want L = %d from the store; %+v", what, got, L, st)
				}
			}

			now := at(time.Second)
			if got := send(t, a, "expired", now, L/2); got != L/2 {
				t.Fatalf("Redis admitted %d of %d", got, L/2)
			}
			b.Peek("expired", now, 1) // b sees the state alive, without units in it
			del("expired")
			check("expired", "expired", now.Add(2*longest))

			if got := send(t, a, "reset", now, L); got != L {
				t.Fatalf("Redis admitted %d of %d", got, L)
			}
			if got := send(t, b, "reset", now, 1); got != 0 {
				t.Fatalf("b: Redis admitted %d past the limit", got)
			}
			if err := a.Reset("reset"); err != nil {
				t.Fatal(err)
			}
			check("reset", "reset", now)
		})
	}
}

// TestExactOwnRefundIsNotALoss: a GCRA unit of 3 minutes refunded
// (Settle) moves the TAT back, so the state may expire long before the
// TAT its grant's reply showed (the TTL follows the TAT). The process
// forgets what it saw of the state when it refunds: the state born again
// after is no loss. (Deleting the keys stands for the TTL's expiry.)
func TestExactOwnRefundIsNotALoss(t *testing.T) {
	a, _, _, del := birthPair(t, func() ExactConfig { return ExactConfig{Config: gcraCfg(20, time.Hour)} })
	now := at(time.Second)
	if r := a.AllowN("k", now, 1); !r.Allowed || r.Err != nil {
		t.Fatalf("grant: %+v", r)
	}
	if err := a.Settle("k", now, -1); err != nil {
		t.Fatal(err)
	}
	del("k")
	r := a.AllowN("k", now.Add(time.Minute), 1)
	if st := a.ExactStats(); !r.Allowed || st.Losses != 0 || st.PolicyDecisions != 0 || st.State != Healthy {
		t.Fatalf("after the refund: %+v; %+v", r, st)
	}
}

// TestExactCallsCrossingALossProof: calls of a process in flight when
// the reply of one of them proves a loss are decided by its policy too,
// not by the store that lost the state. Process b, which had only been
// denied, sends K calls after the key's state is deleted; Redis decides
// them all from the empty state (a proxy holds the replies until it
// has), and the first reply b reads proves the loss: b admits none of
// them (its fallback holds the cluster's usage its denials told). Before,
// every reply but the proving one was taken from the store: K-1 admitted.
func TestExactCallsCrossingALossProof(t *testing.T) {
	srv := redistest.StartServer(t)
	p := redistest.StartProxy(t, srv.Addr)
	prefix := redistest.Prefix(t)
	mk := func(c *redis.Client) *Exact {
		e := newExact(t, c, ExactConfig{
			Config: outageConfigs[0].cfg, Prefix: prefix, Timeout: 20 * time.Second,
			EvictionCheck: time.Hour, HealthInterval: time.Hour,
			DenyCacheKeys: -1, // b's calls after its denials reach the store
		})
		e.callerTime = true
		return e
	}
	const key, K = "user", 5
	cb := newClient(t, p.Addr)
	a, b := mk(newClient(t, srv.Addr)), mk(cb)
	// K connections in b's pool, so the K calls need no new one (whose
	// handshake's reply the proxy would hold).
	var warm stdsync.WaitGroup
	for range K {
		warm.Go(func() { cb.BLPop(context.Background(), 300*time.Millisecond, prefix+"none") })
	}
	warm.Wait()
	L := outageConfigs[0].lims[0]
	now := at(time.Second)
	if got := send(t, a, key, now, L); got != L {
		t.Fatalf("a: Redis admitted %d of %d", got, L)
	}
	if got := send(t, b, key, now, 3); got != 0 {
		t.Fatalf("b: Redis admitted %d past the limit", got)
	}
	c := newClient(t, srv.Addr)
	state := b.StateKeys(key)[0]
	if err := c.Del(context.Background(), state).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetMode(redistest.HoldReplies)
	var wg stdsync.WaitGroup
	var admitted atomic.Int64
	for range K {
		wg.Go(func() {
			if r := b.AllowN(key, now, 1); r.Allowed {
				admitted.Add(1)
			}
		})
	}
	waitFor(t, func() bool { return c.HGet(context.Background(), state, "c").Val() == fmt.Sprint(K) })
	p.SetMode(redistest.Pass)
	wg.Wait()
	if st := b.ExactStats(); admitted.Load() != 0 || st.Losses == 0 || st.PolicyDecisions != K {
		t.Fatalf("%d of %d calls crossing the proof admitted, want 0 (the policy decides them); %+v", admitted.Load(), K, st)
	}
}

// waitFor polls cond every millisecond for at most 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
	}
}

// birthReply returns a decision reply of one rate of limit 10 at at: the
// state born at born (0: none) under the reset marker epoch, used units
// counted before the decision of n units (admitted), reset after reset µs.
func birthReply(at, born, epoch int64, used, n int, reset int64) storeDecision {
	d := storeDecision{at: at, epoch: epoch}
	d.res.Allowed = used+n <= 10
	rem := 10 - used
	if d.res.Allowed {
		rem -= n
	}
	d.rates[0] = rateOutcome{limit: 10, remaining: max(0, rem), reset: time.Duration(reset) * time.Microsecond}
	d.born[0] = born
	return d
}

// TestBirthsCheck: the replies of one key in turn, and whether each
// proves a loss: a new birth (or none) before the state seen could
// expire, without a newer reset marker; not a reply decided before the
// one last seen, nor one of a call sent before the births were cleared.
func TestBirthsCheck(t *testing.T) {
	lims := limitSet{10}
	steps := []struct {
		name       string
		d          storeDecision
		n          int // the cost decided: 1 consumed, 0 a peek
		clearFirst bool
		want       bool
	}{
		{"first sight, 4 units: lives to 1100", birthReply(100, 5, 0, 4, 0, 1000), 0, false, false},
		{"born again before 1100", birthReply(200, 6, 0, 0, 1, 1000), 1, false, true},
		{"a reply decided before the last", birthReply(150, 5, 0, 4, 0, 1000), 0, false, false},
		{"the same birth: lives to 1300", birthReply(300, 6, 0, 1, 1, 1000), 1, false, false},
		{"born again once it could expire", birthReply(1300, 7, 0, 0, 1, 1000), 1, false, false},
		{"gone before 2300", birthReply(1400, 0, 0, 0, 0, 0), 0, false, true},
		{"first sight again: lives to 2450", birthReply(1450, 8, 0, 0, 1, 1000), 1, false, false},
		{"born again after a Reset", birthReply(1500, 9, 3, 0, 1, 1000), 1, false, false},
		{"an older reset marker proves no Reset", birthReply(1600, 10, 2, 0, 1, 1000), 1, false, true},
		{"a state without units need not live", birthReply(3000, 11, 3, 0, 0, 1000), 0, false, false},
		{"so it is not remembered", birthReply(3100, 12, 3, 0, 1, 1000), 1, false, false},
		{"a call sent before a clear", birthReply(3200, 13, 3, 0, 1, 1000), 1, true, false},
		{"after a clear, a first sight", birthReply(3300, 14, 3, 0, 1, 1000), 1, false, false},
		{"and then a proof again", birthReply(3400, 15, 3, 0, 1, 1000), 1, false, true},
	}
	b := newBirths(1, 64)
	for _, s := range steps {
		gen := b.gen.Load()
		if s.clearFirst {
			b.clear()
		}
		d := s.d
		if got := b.check("k", gen, &d, &lims, s.n, s.n > 0); got != s.want {
			t.Errorf("%s: lost %v, want %v", s.name, got, s.want)
		}
	}
}

// TestBirthsBounded: births hold at most their cap of keys; at the cap a
// new key is not remembered until the states seen need not live any
// more, then the sweep makes room.
func TestBirthsBounded(t *testing.T) {
	lims := limitSet{10}
	b := newBirths(1, 32)
	for i := range 1000 {
		d := birthReply(100, 5, 0, 0, 1, 1000)
		b.check(fmt.Sprint("k", i), 0, &d, &lims, 1, true)
	}
	if n := birthKeys(b); n > 32 || n < journalShards {
		t.Fatalf("%d keys held, want at most the cap 32 (and some in every shard)", n)
	}
	// 100 ms of instants later every state seen has expired: room again.
	d := birthReply(200_000, 5, 0, 0, 1, 1000)
	b.check("late", 0, &d, &lims, 1, true)
	d = birthReply(200_100, 6, 0, 0, 1, 1000)
	if !b.check("late", 0, &d, &lims, 1, true) {
		t.Fatal("a key taken after the sweep is not remembered")
	}
	if n := birthKeys(b); n > 32 {
		t.Fatalf("%d keys held after the sweep", n)
	}
}

// birthKeys returns the number of keys b holds (no call may run).
func birthKeys(b *births) (n int) {
	for i := range b.shards {
		n += len(b.shards[i].m)
	}
	return n
}
