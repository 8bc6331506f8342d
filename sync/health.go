package sync

import (
	"fmt"
	"time"
)

// FailurePolicy says how a limiter of this package decides while the
// shared store is unreachable, slow or answering errors.
type FailurePolicy int

const (
	// FallbackLocal (the default) decides in this process alone: limits
	// hold per process, so N processes admit up to N times the limit while
	// the store is down. Exact decides with its local fallback limiter (give
	// ExactConfig.Fallback a stricter limit, such as limit/N, to bound the
	// cluster's total).
	FallbackLocal FailurePolicy = iota
	// FailOpen admits every request whose cost could ever be admitted
	// (n <= limit); Remaining reports limit-n, as for a fresh key.
	FailOpen
	// FailClosed denies every request of positive cost, with RetryAfter the
	// current delay of the reconnect probe.
	FailClosed
)

// String returns "fallback_local", "fail_open" or "fail_closed".
func (p FailurePolicy) String() string {
	switch p {
	case FallbackLocal:
		return "fallback_local"
	case FailOpen:
		return "fail_open"
	case FailClosed:
		return "fail_closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// State is the health of a limiter's connection to the shared store.
type State int32

const (
	// Healthy: the store answers. For Exact, every decision is made by a
	// script in Redis.
	Healthy State = iota
	// Degraded: the store does not answer, evicts keys, or fails too large
	// a share of the limiter's work (see the package doc on health); the
	// FailurePolicy decides. Exact becomes Degraded by an outage when its
	// calls keep failing with transport errors (timeout, refused or broken
	// connection; a failed call's checks of the store count too): at
	// least three in a row, the first started
	// ExactConfig.DegradeAfter or more before the last ended. It then
	// stays so, without touching Redis, until the reconnect probe
	// succeeds. Degraded by its failure share it keeps calling Redis, each
	// failed call decided by the policy.
	Degraded
)

// String returns "healthy" or "degraded".
func (s State) String() string {
	if s == Healthy {
		return "healthy"
	}
	return "degraded"
}

// StateChange is passed to the OnStateChange callback of a limiter's
// configuration.
type StateChange struct {
	// From and To are the states before and after the change.
	From, To State
	// Err is the error that made the limiter degraded (nil on recovery):
	// it wraps ErrUnavailable, ErrRejected, ErrBadReply or ErrEvicting and
	// the error that caused it; for a change by the failure share (see the
	// package doc on health), ErrPolicyShare as well.
	Err error
	// At is the local wall-clock time of the change.
	At time.Time
}
