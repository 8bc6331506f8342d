package sync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// degradeCount is how many calls in a row must fail for Exact to become
// Degraded (and DegradeAfter pass): one slow or lost call is not an outage.
const degradeCount = 3

// failed counts a call started at start that failed with err, and
// degrades the limiter when transport errors have lasted (see DegradeAfter).
func (e *Exact) failed(err error, start time.Time) {
	e.errs.Add(1)
	if isTimeout(err) {
		e.timeouts.Add(1)
	}
	if errors.Is(err, ErrBadReply) {
		e.badReplies.Add(1)
	}
	transport := transportError(err)
	err = storeError(err)
	e.lastErr.set(err)
	if !transport {
		e.endRun() // Redis answered: it is reachable
		return
	}
	// From the first failed call on, the store may restart empty at any
	// moment: decide by the policy until the hub has checked it.
	e.verifyStore()
	if e.sustained(start) {
		e.enterOutage(err)
	}
}

// enterOutage makes the limiter Degraded by an outage whose last failure
// is err: it decides by its policy and the hub probes the store.
func (e *Exact) enterOutage(err error) {
	if r, ok := e.client.(topologyReloader); ok {
		r.ReloadState(context.Background()) // a failed-over Cluster master
	}
	e.hmu.Lock()
	if !e.outage {
		e.outage = true
		e.probeDelay = e.probeMin
		e.probeAt = time.Now().Add(e.probeMin)
		e.backoff.Store(int64(e.probeMin))
		e.settle(err)
	}
	e.hmu.Unlock()
	e.hub.activateExact(e) // reports the change and probes
	e.hub.poke()
}

// sustained adds a call started at start to the run of failed calls and
// reports whether the run is long enough to degrade the limiter.
func (e *Exact) sustained(start time.Time) bool {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.runCalls == 0 || start.Before(e.runStart) {
		e.runStart = start
	}
	e.runCalls++
	e.failing.Store(true)
	return e.runCalls >= degradeCount && time.Since(e.runStart) >= e.degrade
}

// endRun ends the run of failed calls: a call reached Redis.
func (e *Exact) endRun() {
	e.runMu.Lock()
	e.runCalls = 0
	e.failing.Store(false)
	e.runMu.Unlock()
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// settle sets the state from its causes (an outage, eviction, the failure
// share) and queues the change, if any, for the hub to report; cause is
// the error that made it Degraded. Requires e.hmu held.
func (e *Exact) settle(cause error) {
	down := e.outage || e.evicting != nil || e.replaying || e.lossErr != nil
	e.bypass.Store(down || e.checking)
	defer func() { e.busy.Store(e.outage || e.replaying || e.checking || len(e.events) > 0) }()
	want := Healthy
	if down || e.share.high {
		want = Degraded
	}
	if State(e.state.Load()) == want {
		return
	}
	e.state.Store(int32(want))
	c := StateChange{From: Healthy, To: Degraded, Err: cause, At: time.Now()}
	if want == Healthy {
		e.recoveries.Add(1)
		c = StateChange{From: Degraded, To: Healthy, At: c.At}
	} else {
		e.trips.Add(1)
	}
	e.events = append(e.events, c)
}

// setEvicting records the outcome of the hub's eviction check: err wraps
// ErrEvicting while Redis evicts keys, nil once it has stopped.
func (e *Exact) setEvicting(err error) {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	if e.evicting != nil && err == nil {
		// Evicted keys may have held this process's units: decide by the
		// policy until every unit of the journal is in the store again.
		e.resetShare(time.Now())
		e.replaying, e.lost = true, true
		e.replayAt = time.Time{}
	}
	e.evicting = err
	e.settle(err)
}

// verifyStore makes e decide by its policy until the hub has read the
// store's INFO and sent it the units the policy granted: a call failed
// with a transport error (or one succeeded after failed ones), so the
// store may have restarted empty meanwhile, before the failures lasted
// long enough to be an outage. If INFO shows a restart, or cannot tell,
// the hub sends every unit of the journal (see storeLost). A check that
// fails counts as a failed call (see sustained) and is tried again after
// the probe's back-off; e decides by its policy until one succeeds, so no
// call reaches a store that restarted empty before it counts e's units.
func (e *Exact) verifyStore() {
	e.hmu.Lock()
	if !e.outage && !e.replaying && !e.checking {
		e.checking = true
		e.replayAt = time.Time{}
		e.settle(nil)
	}
	e.hmu.Unlock()
	e.hub.activateExact(e)
	e.hub.poke()
}

// storeLost records that the store may have lost its state (it
// restarted): e decides by its policy until every unit of its journal is
// in the store again.
func (e *Exact) storeLost() {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	e.replaying, e.lost = true, true
	e.replayAt = time.Time{}
	e.settle(fmt.Errorf("%w: %w", ErrUnavailable, errRestarted))
}

// errRestarted is the cause of a change to Degraded while Exact replays
// its journal to a store that restarted.
var errRestarted = errors.New("the store restarted (INFO run_id or uptime): replaying this process's units")

// resetShare starts a new health interval at now. Requires e.hmu held.
func (e *Exact) resetShare(now time.Time) {
	e.share.reset(now, e.decisions.Load(), e.policyDecs.Load())
}

// report calls OnStateChange with the changes queued, in order. Only the
// hub's goroutine calls it.
func (e *Exact) report() {
	e.hmu.Lock()
	evs := e.events
	e.events = nil
	e.busy.Store(e.outage || e.replaying || e.checking)
	e.hmu.Unlock()
	for _, c := range evs {
		if e.onChange != nil {
			e.onChange(c)
		}
	}
}

// State returns the current state.
func (e *Exact) State() State {
	return State(e.state.Load())
}

// cool reports whether the hub may stop visiting e: no outage, no change
// to report, no decision since its health interval began, not Degraded
// by its share. Its next decision activates it again.
func (e *Exact) cool() bool {
	e.hot.Store(false)
	e.hmu.Lock()
	c := !e.outage && !e.replaying && !e.checking && e.lossErr == nil && !e.journal.pending.Load() && len(e.events) == 0 && !e.share.high && e.decisions.Load() == e.share.total
	e.hmu.Unlock()
	if !c {
		e.hot.Store(true)
	}
	return c
}

// join adds e to the hub of its client.
func (e *Exact) join() {
	h := clientHub(e.client)
	e.hub = h
	e.hmu.Lock()
	e.resetShare(time.Now())
	e.hmu.Unlock()
	h.mu.Lock()
	h.exact = append(h.exact, e)
	add(h.checks, e.evictEvery, 1)
	h.mu.Unlock()
	h.poke() // the first eviction check
}

// leave takes e out of its hub (see hub.leave).
func (e *Exact) leave(ctx context.Context) {
	h := e.hub
	h.leave(ctx, true, func() {
		removeItem(&h.exact, e)
		add(h.checks, e.evictEvery, -1)
		e.left.Store(true)
	})
}
