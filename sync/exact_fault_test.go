package sync

import (
	"errors"
	stdsync "sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardlimit/shardlimit/internal/redistest"
)

// Fault tests of Exact against private Redis servers (issue 11).

// TestExactDegradesOnSustainedFailure: a private Redis paused. Calls that
// time out during a pause shorter than DegradeAfter are decided by the
// fallback and do not degrade the limiter; a pause that lasts does, with an
// error that keeps its cause; and the fallback continues from what this
// node admitted through Redis, never from a fresh budget.
//
// The short pause is a SIGSTOP ended by SIGCONT once three calls have
// timed out, not a CLIENT PAUSE of 300 ms: three calls of a 100 ms Timeout
// need all of such a pause, and when a loaded machine started them late the
// pause ended first and the test waited forever for a third timeout.
func TestExactDegradesOnSustainedFailure(t *testing.T) {
	// A Timeout with room for a loaded machine, and a DegradeAfter that
	// leaves seconds between the short pause's end and a trip.
	const timeout = 100 * time.Millisecond
	const degradeAfter = 3 * time.Second
	srv := redistest.StartServer(t)
	ch := newChanges()
	e := newExact(t, newClient(t, srv.Addr), ExactConfig{
		Config:        fixedCfg(5, time.Minute),
		Timeout:       timeout,
		DegradeAfter:  degradeAfter,
		ProbeInterval: time.Hour,
		OnStateChange: ch.record,
	})
	// One instant for "used" here and at the end: the fallback decides at
	// the instant passed, so the test may straddle a minute boundary.
	used := time.Now()
	for range 3 {
		if r := e.AllowN("used", used, 1); !r.Allowed || e.ExactStats().Errors != 0 {
			t.Fatalf("healthy: %+v, stats %+v", r, e.ExactStats())
		}
	}

	// A short pause: calls time out (each decided by the fallback) until it
	// ends and one reaches Redis again.
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
	shortStart := time.Now()
	for e.ExactStats().Timeouts < degradeCount {
		if r := e.AllowN("short", time.Now(), 1); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	resume()
	if d := time.Since(shortStart); d >= degradeAfter {
		t.Skipf("the machine took %v for %d calls of a %v Timeout: the short pause was not shorter than DegradeAfter %v", d, degradeCount, timeout, degradeAfter)
	}
	reached := func(st ExactStats) uint64 { return st.Calls - st.Errors }
	for before := reached(e.ExactStats()); reached(e.ExactStats()) == before; {
		e.AllowN("short", time.Now(), 1)
	}
	if st := e.ExactStats(); st.State != Healthy || st.Trips != 0 {
		t.Fatalf("a 300 ms pause degraded the limiter: %+v", st)
	}
	t.Logf("short pause of %v: %+v", time.Since(shortStart), e.ExactStats())

	// A long pause: calls keep timing out for DegradeAfter, and the limiter
	// degrades.
	if _, err := redistest.Do(srv.Addr, "CLIENT", "PAUSE", "60000", "ALL"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for e.State() == Healthy {
		e.AllowN("long", time.Now(), 1)
	}
	took := time.Since(start)
	c := ch.wait(t, Degraded, 10*time.Second)
	if !errors.Is(c.Err, ErrUnavailable) || !isTimeout(c.Err) {
		t.Errorf("state change %+v: want ErrUnavailable and a timeout", c)
	}
	if took < degradeAfter {
		t.Errorf("degraded after %v of failures, DegradeAfter %v", took, degradeAfter)
	}
	// "used" had 3 of 5 admitted through Redis: the fallback admits 2.
	got := 0
	for range 5 {
		if e.AllowN("used", used, 1).Allowed {
			got++
		}
	}
	if got != 2 {
		t.Errorf("the fallback admitted %d, want 2 (5 - 3 admitted through Redis)", got)
	}
	t.Logf("long pause: degraded after %v; %+v", took, e.ExactStats())
}
