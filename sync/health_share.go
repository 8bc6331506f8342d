package sync

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// The health rule of both limiters, besides outages and eviction: a
// limiter whose failure policy decides too large a share of its work over
// a recent interval is Degraded, even while most of its calls succeed.
const (
	// DefaultHealthInterval is the interval over which a limiter measures
	// the share of its work its failure policy decided, when its
	// configuration leaves HealthInterval zero. Intervals are aligned to
	// multiples of their length (Unix time).
	DefaultHealthInterval = time.Second
	// DegradePercent: a limiter becomes Degraded when more than this
	// percentage of its work in one interval went to the failure policy,
	// out of at least MinHealthCount.
	DegradePercent = 10
	// RecoverPercent: a limiter Degraded by its share becomes Healthy
	// again after a whole interval in which less than this percentage (half
	// of DegradePercent) went to the failure policy, or nothing failed;
	// an Exact that still decides by its policy (a call failed and its
	// store has not been checked since) stays Degraded, however idle.
	RecoverPercent = DegradePercent / 2
	// MinHealthCount is the least work (decisions of Exact, store items of
	// Shared) in one interval that can make a limiter Degraded by its
	// share: one failure of an idle limiter does not.
	MinHealthCount = 20
)

// ErrPolicyShare reports that a limiter's failure policy decided more than
// DegradePercent of its work over its HealthInterval. StateChange.Err wraps
// it together with the limiter's last store error (itself wrapping
// ErrUnavailable, ErrRejected or ErrBadReply and its cause).
var ErrPolicyShare = errors.New("shardlimit/sync: the failure policy decided too large a share")

// shareWatch measures, interval by interval, the share of a limiter's
// work (cumulative counts total, of which bad went to the failure policy)
// and applies the hysteresis of the health rule. step and reset are called
// under the limiter's lock; due and last may be called at any time.
type shareWatch struct {
	every      time.Duration
	end        atomic.Int64 // of the current interval, Unix nanoseconds
	total, bad uint64       // cumulative counts at its start
	high       bool         // Degraded by the share

	lastTotal, lastBad atomic.Uint64 // of the last whole interval
}

// newShareWatch returns a watch of intervals of every (0: the default),
// or an error wrapping ErrInvalidConfig if every is outside [1ms, 1h].
func newShareWatch(every time.Duration) (*shareWatch, error) {
	every = cmp0(every, DefaultHealthInterval)
	if every < time.Millisecond || every > time.Hour {
		return nil, badConfig("health interval %v outside [1ms, 1h]", every)
	}
	return &shareWatch{every: every}, nil
}

// due returns when the current interval ends.
func (w *shareWatch) due() time.Time { return time.Unix(0, w.end.Load()) }

// setEnd starts the next interval after now, aligned to its length.
func (w *shareWatch) setEnd(now time.Time) {
	w.end.Store(now.Add(w.every).Truncate(w.every).UnixNano())
}

// reset starts a new interval at now from the cumulative counts total and
// bad, no longer Degraded by the share.
func (w *shareWatch) reset(now time.Time, total, bad uint64) {
	w.total, w.bad, w.high = total, bad, false
	w.setEnd(now)
}

// step ends the current interval if it is over at now, given the
// cumulative counts total and bad, and reports whether high changed.
// While policy is true the limiter still decides by its failure policy
// (its store not yet checked): a high share then stays high, even over an
// interval with no work, so an idle limiter whose store is still away
// does not turn Healthy.
func (w *shareWatch) step(now time.Time, total, bad uint64, policy bool) bool {
	if now.Before(w.due()) {
		return false
	}
	n, b := total-w.total, bad-w.bad
	w.total, w.bad = total, bad
	w.setEnd(now)
	w.lastTotal.Store(n)
	w.lastBad.Store(b)
	switch {
	case !w.high && n >= MinHealthCount && 100*b > DegradePercent*n:
		w.high = true
		return true
	case w.high && !policy && (b == 0 || 100*b < RecoverPercent*n):
		w.high = false
		return true
	}
	return false
}

// last returns the share of the last whole interval, in [0, 1], and the
// count it is a share of.
func (w *shareWatch) last() (float64, uint64) {
	n, b := w.lastTotal.Load(), w.lastBad.Load()
	if n == 0 {
		return 0, 0
	}
	return math.Min(1, float64(b)/float64(n)), n
}

// cause returns the error of a change to Degraded by the share, wrapping
// ErrPolicyShare and last, the limiter's last store error.
func (w *shareWatch) cause(what string, last error) error {
	n, b := w.lastTotal.Load(), w.lastBad.Load()
	if last == nil {
		return fmt.Errorf("%w: %d of %d %s in %v", ErrPolicyShare, b, n, what, w.every)
	}
	return fmt.Errorf("%w: %d of %d %s in %v: %w", ErrPolicyShare, b, n, what, w.every, last)
}
