package sync

import (
	"time"

	"github.com/shardlimit/shardlimit"
)

// byPolicy decides without Redis, under the limits lims.
func (e *Exact) byPolicy(key string, now time.Time, n int, lims *limitSet, consume bool) shardlimit.Result {
	if e.policy == FallbackLocal {
		if consume {
			return e.fallback.AllowN(key, now, n)
		}
		return e.fallback.Peek(key, now, n)
	}
	if e.policy == FailClosed {
		return e.failClosed(n, lims)
	}
	// FailOpen: every rate as a fresh key's.
	var out [shardlimit.MaxRates]rateOutcome
	allowed := true
	for k, rt := range e.rates {
		lim := lims[k]
		o := rateOutcome{limit: lim, window: rt.window}
		if n > lim {
			o.retry, allowed = shardlimit.Never, false
		}
		out[k] = o
	}
	rs := out[:len(e.rates)]
	for k := range rs {
		rs[k].remaining = rs[k].limit
		if allowed {
			rs[k].remaining -= n
		}
	}
	return bind(allowed, rs)
}

// failClosed decides as FailClosed: no room anywhere, the probe's delay
// as the wait.
func (e *Exact) failClosed(n int, lims *limitSet) shardlimit.Result {
	var out [shardlimit.MaxRates]rateOutcome
	rs := out[:len(e.rates)]
	for k, rt := range e.rates {
		rs[k] = rateOutcome{limit: lims[k], window: rt.window}
		if n > lims[k] {
			rs[k].retry = shardlimit.Never
		}
	}
	if n == 0 {
		return bind(true, rs)
	}
	wait := time.Duration(e.backoff.Load())
	for k := range rs {
		if rs[k].retry == 0 {
			rs[k].retry, rs[k].reset = wait, wait
		}
	}
	return bind(false, rs)
}

func (e *Exact) closeFallback() {
	if e.ownFb && e.fallback != nil {
		_ = e.fallback.Close()
	}
}

// Len returns the number of keys the local fallback holds (0 without one).
// Keys in Redis are not counted: that would need a SCAN; they expire by
// their TTL.
func (e *Exact) Len() int {
	if e.fallback == nil {
		return 0
	}
	return e.fallback.Len()
}

// Sweep evicts idle keys of the local fallback and returns how many; Redis
// keys expire by their TTL. It also drops from the journal (see
// ExactConfig.JournalKeys) the keys whose units no longer count at now,
// which it does not count: the journal otherwise drops them only when it
// is full or replays. 0 without a fallback.
func (e *Exact) Sweep(now time.Time) int {
	if e.closed.Load() {
		return 0
	}
	e.journal.sweepAll(now.UnixMicro())
	if e.fallback == nil {
		return 0
	}
	return e.fallback.Sweep(now)
}

// shareFallback records in the fallback, after Redis decided n units of
// key at now with r, this process's fair share of the cluster's usage:
// its usage of the binding rate becomes at least ceil(c*F/L), c = L -
// r.Remaining the units Redis counts for every process in that rate, F
// the fallback's limit of it, and at least its usage before plus n if
// Redis admitted them. The difference is charged with Settle at now, an
// overdraft never refused, so an own grant is recorded even in a full
// fallback; it counts in now's window even when the fallback last decided
// the key in an earlier one (Settle moves the key to now first). When the store fails, the fallback then admits at most F -
// max(own units, c*F/L) more in the window, however unevenly the
// processes' traffic was spread (see the package doc on outages).
//
// Only the binding rate of Redis's reply is shared (a Result carries no
// other); the charge counts in every rate of the fallback, so the other
// rates are charged the same units: stricter. If the fallback binds on
// another rate than Redis (its remaining is the least there), the
// fallback's binding rate is charged c/L of its limit F: exact when both
// bind the same rate, as they do with fallback limits in proportion to
// the limits.
func (e *Exact) shareFallback(key string, now time.Time, n int, r shardlimit.Result) {
	own := 0
	if r.Allowed {
		own = n
	}
	delta := own
	if L := r.Limit; L > 0 {
		fb := e.fallback.Peek(key, now, 0)
		if F := fb.Limit; fb.Err == nil && F > 0 {
			c := int64(L - r.Remaining)
			share := int((c*int64(F) + int64(L) - 1) / int64(L)) // ceil(c*F/L)
			used := F - fb.Remaining
			delta = max(own, share-used)
		}
	}
	if delta > 0 {
		_ = e.fallback.Settle(key, now, delta) // a full table: as AllowN's refusal
	}
}
