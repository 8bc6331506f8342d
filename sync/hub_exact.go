package sync

import (
	"context"
	"fmt"
	"time"
)

// runExact measures the failure share of the Exact limiters with work (see
// activate), reports their state changes, and probes the store for those
// whose calls stopped reaching it (one PING for all whose probe is due).
func (h *hub) runExact(ctx context.Context, now time.Time, next *time.Time) {
	due := h.spareE[:0]
	replays := h.replays[:0]
	nowNs := now.UnixNano()
	for e := range h.hotE {
		if e.left.Load() {
			delete(h.hotE, e)
			continue
		}
		h.log.visit(e)
		if nowNs < e.share.end.Load() && !e.busy.Load() && !e.journal.pending.Load() {
			*next = minTime(*next, e.share.due()) // nothing to do before
			continue
		}
		e.hmu.Lock()
		if e.share.step(now, e.decisions.Load(), e.policyDecs.Load(), e.checking) {
			var cause error
			if e.share.high {
				cause = e.share.cause("decisions by the failure policy", e.lastErr.get())
			}
			e.settle(cause)
		}
		*next = minTime(*next, e.share.due())
		if until := e.stepLoss(now); !until.IsZero() {
			*next = minTime(*next, until)
		}
		switch {
		case e.outage && now.Before(e.probeAt):
			*next = minTime(*next, e.probeAt)
		case e.outage:
			due = append(due, e)
		case e.evicting == nil && e.lossErr == nil && (e.replaying || e.checking || e.journal.pending.Load()):
			if now.Before(e.replayAt) {
				*next = minTime(*next, e.replayAt)
			} else {
				replays = append(replays, e)
			}
		}
		e.hmu.Unlock()
		e.report()
		if e.cool() {
			delete(h.hotE, e)
		}
	}
	if len(due) > 0 {
		h.probe(ctx, due, next)
		replays = append(replays, due...) // those still in outage are skipped
	}
	for _, e := range replays {
		h.replayExact(ctx, e, next)
	}
	clear(due)
	clear(replays)
	h.spareE, h.replays = due[:0], replays[:0]
}

// replayExact sends e's journal to the store (see Exact.replay): its
// pending units, or all of them if the store may have lost state. On
// success e stops deciding by its policy for the replay; on failure the
// units stay for the next try, after the probe's back-off.
func (h *hub) replayExact(ctx context.Context, e *Exact, next *time.Time) {
	e.hmu.Lock()
	if e.outage || e.evicting != nil || e.lossErr != nil {
		e.hmu.Unlock()
		return
	}
	check := e.checking
	e.hmu.Unlock()
	start := time.Now()
	var err error
	if check {
		var lost bool
		lost, err = h.checkStore(ctx)
		if h.watch.takeRestart() {
			h.storeLost() // e's and the others' units may be gone
		}
		e.hmu.Lock()
		e.lost = e.lost || lost
		e.hmu.Unlock()
	}
	e.hmu.Lock()
	all := e.lost
	if err == nil {
		e.lost = false
	}
	e.hmu.Unlock()
	if err == nil {
		e.replays.Add(1)
		if all {
			e.births.clear() // states the store holds after are new, not losses
		}
		err = e.replay(ctx, all)
	}
	// Units the policy granted meanwhile, while it still decides: a few
	// more tries before Redis decides again.
	for try := 0; err == nil && try < 3 && e.journal.pending.Load(); try++ {
		err = e.replay(ctx, false)
	}
	*next = minTime(*next, e.replayOutcome(err, all))
	if err != nil && transportError(err) && e.sustained(start) {
		e.enterOutage(err) // the check's failures count as the calls'
	}
	e.report()
}

// replayOutcome records the outcome err of a replay (of every unit if all) and
// returns when the next is due if it failed (else far in the future).
func (e *Exact) replayOutcome(err error, all bool) time.Time {
	now := time.Now()
	e.hmu.Lock()
	defer e.hmu.Unlock()
	if err != nil {
		e.replayFails.Add(1)
		e.lost = e.lost || all
		e.lastErr.set(err)
		e.replayAt = now.Add(e.probeDelay)
		e.probeDelay = min(2*e.probeDelay, e.probeMax)
		// The store fails again: the units stay pending, and e keeps
		// deciding by its policy (checking) until a check succeeds.
		return e.replayAt
	}
	e.probeDelay = e.probeMin
	if e.replaying {
		e.resetShare(now)
	}
	if e.replaying || e.checking {
		e.replaying, e.checking = false, false
		e.endRun()
		e.settle(nil)
	}
	return now.Add(time.Hour)
}

// storeLost tells every Exact limiter of the hub that the store may have
// lost its state (it restarted): each decides by its policy until it has
// replayed every unit of its journal.
func (h *hub) storeLost() {
	h.mu.Lock()
	ex := append([]*Exact(nil), h.exact...)
	h.mu.Unlock()
	for _, e := range ex {
		e.storeLost()
		h.hotE[e] = struct{}{}
		e.hot.Store(true)
	}
}

// checkStore reads the store's INFO after a failed call: lost reports
// whether it restarted since the hub last read it, or whether that cannot
// be told (INFO is not watched, or no reading before to compare with); err
// is the failure to read it (the store is still unreachable: nothing is
// told, the check fails).
func (h *hub) checkStore(ctx context.Context) (lost bool, err error) {
	if h.read == nil || !h.watch.on() {
		return true, nil
	}
	cctx, cancel := context.WithTimeout(ctx, hubEvictionTimeout)
	in, err := h.read(cctx)
	cancel()
	if err != nil && !transportError(err) {
		return true, nil // refused (an ACL): it cannot be told
	}
	if err != nil {
		return false, fmt.Errorf("read INFO: %w", storeError(err))
	}
	restarted, known := h.watch.observe(in)
	return restarted || !known, nil
}

// lostState reports whether the store, answering again after an outage,
// may have lost its state: INFO shows it restarted, or that cannot be
// told (no INFO, or no reading before the outage to compare with).
func (h *hub) lostState(ctx context.Context) bool {
	if h.read == nil || !h.watch.on() {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, hubEvictionTimeout)
	in, err := h.read(cctx)
	cancel()
	if err != nil {
		return true
	}
	restarted, known := h.watch.observe(in)
	return restarted || !known
}

// probe pings the store once for the Exact limiters of due: on success
// each leaves its outage (Healthy again unless the store still evicts);
// on failure each doubles its probe's delay, up to MaxProbeInterval.
func (h *hub) probe(ctx context.Context, due []*Exact, next *time.Time) {
	timeout := due[0].timeout
	for _, e := range due {
		timeout = max(timeout, e.timeout)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	_, err := call(cctx, func() (any, error) { return h.client.Ping(cctx).Result() }, nil)
	cancel()
	lost := false
	if err == nil {
		lost = h.lostState(ctx)
		if h.watch.takeRestart() {
			h.storeLost() // the others too
		}
	}
	now := time.Now()
	for _, e := range due {
		e.probes.Add(1)
		e.hmu.Lock()
		if err != nil {
			e.probeFails.Add(1)
			e.lastErr.set(storeError(err))
			e.probeDelay = min(2*e.probeDelay, e.probeMax)
			e.probeAt = now.Add(e.probeDelay)
			e.backoff.Store(int64(e.probeDelay))
			*next = minTime(*next, e.probeAt)
		} else {
			e.backoff.Store(int64(e.probeMin))
			e.endRun()
			e.outage = false
			// Decide by the policy until the journal is in the store.
			e.replaying = true
			e.lost = e.lost || lost
			e.replayAt = now
			e.resetShare(now)
			e.settle(nil)
		}
		e.hmu.Unlock()
		e.report()
	}
}
