package sync

import (
	"context"
	"fmt"
	"time"
)

// State returns the health of the link to the store.
func (s *Shared) State() State { return State(s.state.Load()) }

// record updates the health after a flush or probe that failed with err
// (nil: it succeeded). Requires s.flushMu held.
func (s *Shared) record(err error) {
	if err == nil {
		if s.failures >= s.failMax {
			// Back from an outage: its failed items are not a share
			// of a working store's.
			s.resetShare(time.Now())
		}
		s.failures = 0
	} else {
		s.failures++
	}
	s.failing.Store(s.failures > 0)
	s.update(err)
}

// setEvicting records the outcome of an eviction check: err wraps
// ErrEvicting while the store evicts keys, nil once it has stopped.
// Requires s.flushMu held.
func (s *Shared) setEvicting(err error) {
	if s.evicting != nil && err == nil {
		s.resetShare(time.Now())
	}
	s.evicting = err
	s.update(err)
}

// lose records that a flush read a total of a live bucket lower than
// the other nodes' units this node had read for it: the store lost lost
// units (it evicted the counter, restarted empty or failed over before
// replicating; the nodes that sent them restore them at their next flush
// of the key). That is proof of what the eviction check only suspects, so
// the limiter turns Degraded at once, with an error wrapping ErrEvicting,
// and stays so for an EvictionCheck (DefaultEvictionCheck if eviction is
// not watched) after the last such read. Requires s.flushMu held.
func (s *Shared) lose(lost int64) {
	s.lostUnits.Add(uint64(lost))
	s.losses.Add(1)
	hold := s.evictEvery
	if hold <= 0 {
		hold = DefaultEvictionCheck
	}
	s.lossUntil = time.Now().Add(hold)
	if s.lossErr != nil {
		return // held already: the first loss of the hold is its cause
	}
	s.lossy.Store(true)
	s.lossErr = fmt.Errorf("%w: a counter read %d units fewer than this node had read in its window (the store lost them)", ErrEvicting, lost)
	s.update(s.lossErr)
}

// stepLoss ends the hold of a loss (see lose) that is over at now, and
// returns when it ends otherwise (zero: none). Requires s.flushMu held.
func (s *Shared) stepLoss(now time.Time) time.Time {
	if s.lossErr == nil {
		return time.Time{}
	}
	if now.Before(s.lossUntil) {
		return s.lossUntil
	}
	s.lossErr = nil
	s.lossy.Store(false)
	s.resetShare(now)
	s.update(nil)
	return time.Time{}
}

// quiet reports whether s has nothing to flush: no key queued since the
// last flush, no key near its limit to read, no failure to probe past.
// It takes no lock.
func (s *Shared) quiet() bool {
	return !s.hasNear.Load() && !s.failing.Load() && !s.tab.TakePending()
}

// cool reports whether the hub may stop visiting s: nothing to flush,
// no failure, nothing sent since its health interval began, not Degraded
// by its share. A key queued from then on activates it again.
func (s *Shared) cool() bool {
	s.active.Store(false)
	s.flushMu.Lock()
	c := !s.share.high && s.failures == 0 && len(s.near) == 0 && s.lossErr == nil &&
		s.itemCount.Load() == s.share.total && !s.tab.Pending()
	s.flushMu.Unlock()
	if !c {
		s.active.Store(true)
	}
	return c
}

// resetShare starts a new health interval at now. Requires s.flushMu held.
func (s *Shared) resetShare(now time.Time) {
	s.share.reset(now, s.itemCount.Load(), s.itemErrs.Load())
}

// stepShare ends the health interval if it is over at now and moves the
// state if the share of failed items crossed its bounds. Requires
// s.flushMu held.
func (s *Shared) stepShare(now time.Time) {
	if s.share.step(now, s.itemCount.Load(), s.itemErrs.Load(), false) {
		var cause error
		if s.share.high {
			cause = s.share.cause("store items failed", s.lastErr.get())
		}
		s.update(cause)
	}
}

// schedule sets when the hub may flush next after a flush started at
// start: at its next tick (see hub.runShared), or while the store is down
// at the first tick a back-off after start. prev is the start of the
// tick before, at which s, if the hub did not visit it, had nothing to
// flush. Only the hub calls it.
func (s *Shared) schedule(start time.Time, down bool, prev time.Time) {
	if down {
		s.backoff = min(2*s.backoff, max(s.interval, time.Second))
		s.lastStart = time.Time{}
	} else {
		if !s.lastStart.IsZero() {
			last := s.lastStart
			if prev.After(last) {
				last = prev
			}
			if gap := int64(start.Sub(last)); gap > s.maxGap.Load() {
				s.maxGap.Store(gap) // only the hub writes it
			}
		}
		s.backoff = s.interval
		s.lastStart = start
	}
	s.next = start.Add(s.backoff - s.interval/2)
}

// update moves the state to what the failures, the eviction and the
// failure share say; cause is the error that changed them. Requires
// s.flushMu held.
func (s *Shared) update(cause error) {
	if s.failures >= s.failMax || s.evicting != nil || s.lossErr != nil || s.share.high {
		if cause == nil {
			cause = cmpErr(s.evicting, s.lossErr)
		}
		if s.state.CompareAndSwap(int32(Healthy), int32(Degraded)) {
			s.trips.Add(1)
			s.applyFallback(true)
			s.notify(StateChange{From: Healthy, To: Degraded, Err: cause, At: time.Now()})
		}
		return
	}
	if s.state.CompareAndSwap(int32(Degraded), int32(Healthy)) {
		s.recoveries.Add(1)
		s.applyFallback(false)
		s.notify(StateChange{From: Degraded, To: Healthy, At: time.Now()})
	}
}

// applyFallback switches the default limits to the fallback limits and
// back.
func (s *Shared) applyFallback(on bool) {
	if s.fbLimits == nil || s.policy != FallbackLocal {
		return
	}
	s.defMu.Lock()
	defer s.defMu.Unlock()
	if on {
		_ = s.core.SetDefaultLimits(s.fbLimits...)
	} else {
		_ = s.core.SetDefaultLimits(s.defLimits...)
	}
}

// notify calls OnStateChange. Requires s.flushMu held: changes are made,
// and reported, one at a time.
func (s *Shared) notify(c StateChange) {
	if s.onChange != nil {
		s.onChange(c)
	}
}

// join adds s to the hub of its store and schedules its first flush.
func (s *Shared) join() {
	if rb, ok := s.backend.(*RedisBackend); ok {
		s.hub = clientHub(rb.client)
	} else {
		s.hub = backendHub(s.backend)
	}
	s.backoff = s.interval
	s.resetShare(time.Now())
	h := s.hub
	s.tab.SetQueueHook(func() { h.activateShared(s) })
	h.mu.Lock()
	h.shared = append(h.shared, s)
	add(h.intervals, s.interval, 1)
	add(h.checks, s.evictEvery, 1)
	h.mu.Unlock()
	h.activateShared(s)
	h.poke() // to tick at its FlushInterval from now on
}

// leave takes s out of its hub (see hub.leave).
func (s *Shared) leave(ctx context.Context) {
	h := s.hub
	h.leave(ctx, false, func() {
		removeItem(&h.shared, s)
		add(h.intervals, s.interval, -1)
		add(h.checks, s.evictEvery, -1)
		s.left.Store(true)
	})
}
