package sync

import (
	"time"
)

// State returns the health of the link to the store.
func (s *Shared) State() State { return State(s.state.Load()) }

// failing reports whether the last flush or probe failed.
func (s *Shared) failing() bool {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.failures > 0
}

// down reports whether enough flushes failed in a row to degrade the
// limiter.
func (s *Shared) down() bool {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.failures >= s.failMax
}

// record updates the health after a flush or probe that failed with err
// (nil: it succeeded). Requires s.flushMu held.
func (s *Shared) record(err error) {
	if err == nil {
		s.failures = 0
	} else {
		s.failures++
	}
	s.update(err)
}

// setEvicting records the outcome of an eviction check: err wraps
// ErrEvicting while the store evicts keys, nil once it has stopped.
// Requires s.flushMu held.
func (s *Shared) setEvicting(err error) {
	s.evicting = err
	s.update(err)
}

// update moves the state to what the failures and the eviction say; cause
// is the error that changed them. Requires s.flushMu held.
func (s *Shared) update(cause error) {
	if s.failures >= s.failMax || s.evicting != nil {
		if cause == nil {
			cause = s.evicting
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

func (s *Shared) notify(c StateChange) {
	if s.onChange != nil {
		s.onChange(c)
	}
}
