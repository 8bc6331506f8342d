package mwengine

import (
	"net/textproto"
	"sync/atomic"

	"github.com/shardlimit/shardlimit"
	"github.com/shardlimit/shardlimit/httplimit"
)

// settleState is a limiter's settlement counters (httplimit.SettleStats),
// atomic.
type settleState struct {
	refunded, charged, badReports, errs atomic.Uint64
}

// stats returns the counters.
func (st *settleState) stats() httplimit.SettleStats {
	return httplimit.SettleStats{
		Refunded: st.refunded.Load(), Charged: st.charged.Load(),
		BadReports: st.badReports.Load(), Errors: st.errs.Load(),
	}
}

// outcomeRule is how a rule settles its decisions after the handler.
type outcomeRule struct {
	count      httplimit.CountOutcome // "" or CountAll: every response counts
	costHeader string                 // canonical MIME form; "" if none
	settles    bool                   // count or costHeader asks for settling
}

// newOutcomeRule compiles ru's Count and CostHeader (validated).
func newOutcomeRule(ru *httplimit.Rule) outcomeRule {
	o := outcomeRule{count: ru.Count, settles: ru.Settles()}
	if ru.CostHeader != "" {
		o.costHeader = textproto.CanonicalMIMEHeaderKey(ru.CostHeader)
	}
	return o
}

// EnableCostHook tells the engine that its middleware has a final cost
// hook, so that the decisions of every rule are settled after the handler
// (every shardlimit.Limiter settles). Call it before the first request.
func (e *Engine) EnableCostHook() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.costHook = true
}

// Reported costs that are not costs, from ParseCost and CheckCost.
const (
	// NoCost: the response reported no final cost.
	NoCost = -1
	// BadCost: the response reported something that is not a cost in
	// [0, shardlimit.MaxLimit]; counted in SettleStats.BadReports and
	// ignored.
	BadCost = -2
)

// Settles reports whether the request o decided is to be settled after
// the handler (Settle): it was admitted by a rule that counts by outcome
// or reads a cost header, or the middleware has a final cost hook. The
// middleware must then keep the request's Scratch until Settle returns.
func (e *Engine) Settles(o *Outcome) bool {
	return o.Action == httplimit.ActionAllow && o.r != nil && (o.r.out.settles || e.costHook)
}

// CostHeader returns the canonical name of the response header that
// reports the final cost of the request o decided, or "" if its rule has
// none. The middleware removes it from the response.
func (o *Outcome) CostHeader() string {
	if o.r == nil {
		return ""
	}
	return o.r.out.costHeader
}

// ParseCost returns the cost a cost header's value v reports: NoCost if v
// is empty, BadCost if it is not a decimal integer in
// [0, shardlimit.MaxLimit] (no sign, no spaces). It does not allocate.
func ParseCost[S byteseq](v S) int {
	if len(v) == 0 {
		return NoCost
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return BadCost
		}
		n = n*10 + int(c-'0')
		if n > shardlimit.MaxLimit {
			return BadCost
		}
	}
	return n
}

// CheckCost returns n, a final cost a hook returned, if it is in
// [0, shardlimit.MaxLimit], else BadCost.
func CheckCost(n int) int {
	if n < 0 || n > shardlimit.MaxLimit {
		return BadCost
	}
	return n
}

// Settle settles the request o decided (for which Settles is true) once
// its handler returned: status is the response's status (0 means 200; 500
// for a handler that panicked) and cost the final cost reported (from
// ParseCost or CheckCost; NoCost keeps the cost decided). A response its
// rule does not count (httplimit.Rule.Count, judged by
// Options.FailedResponse or status >= 400) has a final cost of 0. The
// difference to the cost decided is passed to the rule limiter's Settle,
// at the instant the request was decided at, for the key in sc, which must
// be the Scratch Decide filled. Failures are counted, never returned: the
// response is already made.
func (e *Engine) Settle(sc *Scratch, o *Outcome, status, cost int) {
	r := o.r
	st := &r.l.settle
	final := o.Cost
	switch {
	case cost == BadCost:
		st.badReports.Add(1)
	case cost >= 0:
		final = cost
	}
	if c := r.out.count; c == httplimit.CountFailed || c == httplimit.CountSuccessful {
		if status == 0 {
			status = 200
		}
		failed := status >= 400
		if e.failedResp != nil {
			failed = e.failedResp(o.Decision, status)
		}
		if !c.Counts(failed) {
			final = 0
		}
	}
	delta := final - o.Cost
	if delta == 0 {
		return
	}
	// sc.lkey is the rule's namespace then the client key; put the
	// namespace back, in case the request was decided by another rule
	// too, whose namespace (of the same length) took its place.
	copy(sc.lkey, r.l.ns)
	switch err := r.l.lim.Settle(string(sc.lkey), o.Time, delta); {
	case err != nil:
		st.errs.Add(1)
	case delta < 0:
		st.refunded.Add(uint64(-delta))
	default:
		st.charged.Add(uint64(delta))
	}
}
