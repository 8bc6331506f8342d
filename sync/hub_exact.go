package sync

import (
	"context"
	"time"
)

// runExact measures the failure share of the Exact limiters with work (see
// activate), reports their state changes, and probes the store for those
// whose calls stopped reaching it (one PING for all whose probe is due).
func (h *hub) runExact(ctx context.Context, now time.Time, next *time.Time) {
	due := h.spareE[:0]
	nowNs := now.UnixNano()
	for e := range h.hotE {
		if e.left.Load() {
			delete(h.hotE, e)
			continue
		}
		h.log.visit(e)
		if nowNs < e.share.end.Load() && !e.busy.Load() {
			*next = minTime(*next, e.share.due()) // nothing to do before
			continue
		}
		e.hmu.Lock()
		if e.share.step(now, e.decisions.Load(), e.policyDecs.Load()) {
			var cause error
			if e.share.high {
				cause = e.share.cause("decisions by the failure policy", e.lastErr.get())
			}
			e.settle(cause)
		}
		*next = minTime(*next, e.share.due())
		if e.outage {
			if now.Before(e.probeAt) {
				*next = minTime(*next, e.probeAt)
			} else {
				due = append(due, e)
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
	}
	clear(due)
	h.spareE = due[:0]
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
			e.resetShare(now)
			e.settle(nil)
		}
		e.hmu.Unlock()
		e.report()
	}
}
