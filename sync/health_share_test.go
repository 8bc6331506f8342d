package sync

import (
	"errors"
	"fmt"
	stdsync "sync"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/internal/redistest"
)

// TestShareWatchHysteresis: the health rule decided interval by interval
// from counts alone: Degraded above DegradePercent of at least
// MinHealthCount, Healthy again after a whole interval below
// RecoverPercent (or with no failure), nothing in between; and never
// Healthy while the limiter still decides by its policy.
func TestShareWatchHysteresis(t *testing.T) {
	w, err := newShareWatch(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	base := T0
	w.reset(base, 0, 0)
	var total, bad uint64
	steps := []struct {
		n, b   uint64 // work and failures in the interval
		high   bool   // Degraded by the share after it
		policy bool   // the limiter still decides by its policy
	}{
		{1, 1, false, false},    // one failure of an idle limiter
		{19, 19, false, false},  // below MinHealthCount
		{100, 10, false, false}, // 10%: not above it
		{100, 11, true, false},  // above 10%
		{100, 6, true, false},   // 6%: not below 5%
		{100, 5, true, false},   // 5%: not below it
		{10, 1, true, false},    // 10% of a few: no evidence either way
		{100, 4, false, false},  // below 5% for a whole interval
		{100, 6, false, false},  // 6%: not above 10%
		{20, 3, true, false},    // 15% of MinHealthCount
		{0, 0, true, true},      // idle, its store not yet checked: no recovery
		{100, 0, true, true},    // nothing failed, but the policy still decides
		{0, 0, false, false},    // an idle interval: nothing failed
	}
	for i, st := range steps {
		total += st.n
		bad += st.b
		at := base.Add(time.Duration(i+1) * time.Second)
		if w.step(at.Add(-time.Millisecond), total, bad, st.policy) {
			t.Fatalf("step %d: changed before the interval ended", i)
		}
		changed := w.step(at, total, bad, st.policy)
		if w.high != st.high || changed != (i == 0 && st.high || i > 0 && st.high != steps[i-1].high) {
			t.Fatalf("step %d (%d of %d): high %v changed %v, want high %v", i, st.b, st.n, w.high, changed, st.high)
		}
		if share, n := w.last(); n != st.n || n > 0 && share != float64(st.b)/float64(st.n) {
			t.Fatalf("step %d: last share %v of %d", i, share, n)
		}
	}
	if _, err := newShareWatch(time.Microsecond); !errors.Is(err, shardlimit.ErrInvalidConfig) {
		t.Fatalf("health interval 1µs: %v", err)
	}
}

// healthRun drives decisions of allow from workers goroutines until stop
// is closed.
func healthRun(workers int, allow func(i int), stop chan struct{}) (wait func()) {
	var wg stdsync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				allow(w*1_000_000 + i)
			}
		}()
	}
	return wg.Wait
}

// checkShareChange checks a change to Degraded by the failure share: its
// Err wraps ErrPolicyShare and every error of want.
func checkShareChange(t *testing.T, c StateChange, want ...error) {
	t.Helper()
	if !errors.Is(c.Err, ErrPolicyShare) {
		t.Errorf("change %+v does not wrap ErrPolicyShare", c)
	}
	for _, w := range want {
		if !errors.Is(c.Err, w) {
			t.Errorf("change %v does not wrap %v", c.Err, w)
		}
	}
}

// recoverOnce makes the proxy pass every reply and checks that the
// limiter becomes Healthy and stays so for two more intervals of traffic,
// until stop: one change each way in all (stats returns its trips,
// recoveries and state).
func recoverOnce(t *testing.T, p *redistest.Proxy, ch changes, stop chan struct{}, wait func(), stats func() (uint64, uint64, State)) {
	t.Helper()
	p.SetTamper(0, 0)
	ch.wait(t, Healthy, 30*time.Second)
	time.Sleep(2 * DefaultHealthInterval)
	close(stop)
	wait()
	select {
	case c := <-ch:
		t.Errorf("one change too many: %+v", c)
	default:
	}
	if trips, recoveries, state := stats(); trips != 1 || recoveries != 1 || state != Healthy {
		t.Errorf("trips %d, recoveries %d, state %v: want one each way, healthy", trips, recoveries, state)
	}
}

// TestExactHealthShare: an Exact limiter in front of a proxy that stalls
// every 4th script reply (25% of its calls time out: each failure ends a
// run of successes, so the limiter never sees an outage) or answers every
// 2nd with garbage becomes Degraded by its failure share, with the share
// in ExactStats and the cause in the change; once the proxy passes every
// reply it is Healthy again; exactly one change each way.
func TestExactHealthShare(t *testing.T) {
	cases := []struct {
		name string
		k    int
		how  redistest.Tamper
		want []error
	}{
		{"stall", 4, redistest.Stall, []error{ErrUnavailable}},
		{"garbage", 2, redistest.Garbage, []error{ErrBadReply}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			p := redistest.StartCommandProxy(t, srv.Addr)
			ch := newChanges()
			e := newExact(t, newClient(t, p.Addr), ExactConfig{Config: fixedCfg(1<<20, time.Minute),
				// The stalled calls time out; the others answer within
				// milliseconds, far below it even on a loaded machine.
				Timeout:       time.Second,
				DegradeAfter:  time.Minute, // no outage: only the share
				EvictionCheck: -1, OnStateChange: ch.record})
			p.SetTamper(tc.k, tc.how)
			stop := make(chan struct{})
			wait := healthRun(16, func(i int) { e.Allow(fmt.Sprint("k", i%64)) }, stop)
			c := ch.wait(t, Degraded, 30*time.Second)
			st := e.ExactStats()
			t.Logf("%v; policy share %.2f of %d decisions", c.Err, st.PolicyShare, st.RecentDecisions)
			checkShareChange(t, c, tc.want...)
			if tc.how == redistest.Stall && !isTimeout(c.Err) {
				t.Errorf("change %v: the cause is not a timeout", c.Err)
			}
			if st.State != Degraded || st.PolicyShare*100 <= DegradePercent || st.RecentDecisions < MinHealthCount {
				t.Errorf("stats %+v", st)
			}
			recoverOnce(t, p, ch, stop, wait, func() (uint64, uint64, State) {
				st := e.ExactStats()
				return st.Trips, st.Recoveries, st.State
			})
		})
	}
}

// TestSharedHealthShare: a Shared limiter whose store answers every 2nd
// script reply with garbage (its script calls carry 8 items each: half its
// items unreadable, yet every flush of its 64 keys applies some) becomes
// Degraded by its failure share, and Healthy again once the store answers
// properly; exactly one change each way.
func TestSharedHealthShare(t *testing.T) {
	srv := redistest.StartServer(t)
	p := redistest.StartCommandProxy(t, srv.Addr)
	ch := newChanges()
	client := newClient(t, p.Addr)
	b := newBackend(t, client)
	b.perScript = 8
	s := newShared(t, client, SharedConfig{
		Config:        shardlimit.Config{Algorithm: shardlimit.FixedWindow, Limit: 1 << 20, Window: time.Minute, Clock: shardlimit.SystemClock()},
		Backend:       b,
		FlushInterval: 10 * time.Millisecond, EvictionCheck: -1, OnStateChange: ch.record})
	p.SetTamper(2, redistest.Garbage)
	stop := make(chan struct{})
	wait := healthRun(4, func(i int) { s.Allow(fmt.Sprint("k", i%64)) }, stop)
	c := ch.wait(t, Degraded, 30*time.Second)
	st := s.SharedStats()
	t.Logf("%v; policy share %.2f of %d items", c.Err, st.PolicyShare, st.RecentItems)
	checkShareChange(t, c, ErrBadReply)
	if st.State != Degraded || st.PolicyShare*100 <= DegradePercent || st.RecentItems < MinHealthCount || st.FailedFlushes != 0 {
		t.Errorf("stats %+v", st)
	}
	recoverOnce(t, p, ch, stop, wait, func() (uint64, uint64, State) {
		st := s.SharedStats()
		return st.Trips, st.Recoveries, st.State
	})
}
