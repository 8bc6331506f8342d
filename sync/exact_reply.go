package sync

import (
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit"
)

// storeDecision is a decision script's reply, decoded.
type storeDecision struct {
	res   shardlimit.Result
	at    int64 // the instant the store decided at, Unix µs
	epoch int64 // the key's reset marker (see resetScript), 0 if none
	rates [shardlimit.MaxRates]rateOutcome
	born  [shardlimit.MaxRates]int64 // each rate's state's birth (see births), 0 if none
}

// decodeDecision checks the reply of a decision script for cost n under
// limits lims, one per rate of rates: {allowed, then per rate: remaining,
// reset_us, retry_us, then now_us, then the reset marker, then per rate:
// the birth of its state}, every number in range and consistent with n
// and the rate's limit. It converts the reply to a Result (see bind) and
// keeps each rate's outcome, the instant the store decided at and the
// births.
func decodeDecision(v any, n int, lims []int, rates []exactRate) (storeDecision, error) {
	var d storeDecision
	R := len(rates)
	arr, x, err := replyInts(v, 3+4*R)
	if err != nil {
		return d, err
	}
	allowed, at, epoch := x[0], x[1+3*R], x[2+3*R]
	if allowed != 0 && allowed != 1 || n == 0 && allowed == 0 || at < 0 || at > maxInstant || epoch < 0 {
		return d, fmt.Errorf("%w: inconsistent decision %v", ErrBadReply, arr)
	}
	for k, b := range x[3+3*R : 3+4*R] {
		if b < 0 || b > maxInstant {
			return d, fmt.Errorf("%w: inconsistent decision %v (birth of rate %d)", ErrBadReply, arr, k)
		}
		d.born[k] = b
	}
	for k, rt := range rates {
		o, ok := decodeRate([3]int64(x[1+3*k:4+3*k]), allowed == 1, n, lims[k], rt.window)
		if !ok {
			return d, fmt.Errorf("%w: inconsistent decision %v (rate %d, limit %d, cost %d)", ErrBadReply, arr, k, lims[k], n)
		}
		d.rates[k] = o
	}
	d.res, d.at, d.epoch = bind(allowed == 1, d.rates[:len(rates)]), at, epoch
	return d, nil
}

// maxInstant is the latest instant the scripts take, Unix µs (2^52 - 1).
const maxInstant = 1<<52 - 1

// replyInts checks that v is an array of want integers and returns it,
// and its integers in the first want elements of x.
func replyInts(v any, want int) (arr []any, x [3 + 4*shardlimit.MaxRates]int64, err error) {
	arr, ok := v.([]any)
	if !ok || len(arr) != want {
		return nil, x, fmt.Errorf("%w: got %T %v, want an array of %d integers", ErrBadReply, v, v, want)
	}
	for i, el := range arr {
		if x[i], ok = el.(int64); !ok {
			return nil, x, fmt.Errorf("%w: element %d is %T, want an integer", ErrBadReply, i, el)
		}
	}
	return arr, x, nil
}

// decodeRate converts one rate's part of a decision reply, {remaining,
// reset_us, retry_us} (retry_us -1: never), for cost n under limit lim, and
// reports whether it is in range and consistent with n, lim and the
// decision (allowed).
func decodeRate(v [3]int64, allowed bool, n, lim int, window time.Duration) (rateOutcome, bool) {
	const maxUs = int64(1<<63-1) / int64(time.Microsecond)
	rem, reset, retry := v[0], v[1], v[2]
	switch {
	case rem < 0 || rem > int64(lim),
		reset < 0 || reset > maxUs,
		retry < -1 || retry > maxUs,
		allowed && retry != 0,
		n > 0 && (retry == -1) != (n > lim):
		return rateOutcome{}, false
	}
	o := rateOutcome{limit: lim, window: window, remaining: int(rem), reset: time.Duration(reset) * time.Microsecond}
	if retry == -1 {
		o.retry = shardlimit.Never
	} else {
		o.retry = time.Duration(retry) * time.Microsecond
	}
	return o, true
}

// rateOutcome is one rate's side of a decision.
type rateOutcome struct {
	limit     int
	window    time.Duration
	remaining int           // after the decision, in [0, limit]
	reset     time.Duration // until the rate's usage next drops
	retry     time.Duration // until the rate admits the request: 0 if it does, Never if no wait can
}

// bind returns the Result of a decision, admitted or not, from each
// rate's outcome, as the in-process limiters report one: Limit, Remaining,
// ResetAfter and Window of the binding rate, the one with the least
// remaining (ties: the longest window); if denied, RetryAfter the latest
// of the rates' waits (each rate's usage only drops while none is
// admitted, so that is the first instant at which all admit; Never if any
// never does), at least a microsecond.
func bind(allowed bool, rs []rateOutcome) shardlimit.Result {
	b := 0
	var retry time.Duration
	for i, o := range rs {
		retry = max(retry, o.retry)
		if o.remaining < rs[b].remaining || o.remaining == rs[b].remaining && o.window > rs[b].window {
			b = i
		}
	}
	r := shardlimit.Result{
		Allowed:    allowed,
		Limit:      rs[b].limit,
		Remaining:  rs[b].remaining,
		ResetAfter: rs[b].reset,
		Window:     rs[b].window,
	}
	if !allowed {
		r.RetryAfter = max(retry, time.Microsecond)
	}
	return r
}
