package httplimit

import (
	"fmt"
	"net/textproto"

	"github.com/shardlimit/shardlimit"
)

// CountOutcome says which responses of a rule count against its limit
// (Rule.Count). The decision is always made before the handler runs, so a
// client at its limit is denied whatever its response would have been;
// a response that must not count is refunded after the handler (see
// "Settling after the handler" in the package documentation).
type CountOutcome string

const (
	// CountAll (or "") counts every admitted request: the default.
	CountAll CountOutcome = "all"
	// CountFailed counts only failed responses: status 400 and above by
	// default, or what Options.FailedResponse says. A client may then make
	// any number of successful requests, and at most the limit of failed
	// ones per window (login attempts, say). It is fiber's
	// SkipSuccessfulRequests and express-rate-limit's
	// skipSuccessfulRequests.
	CountFailed CountOutcome = "failed"
	// CountSuccessful counts only successful responses (those not failed):
	// failed requests are refunded. It is fiber's SkipFailedRequests and
	// express-rate-limit's skipFailedRequests.
	CountSuccessful CountOutcome = "successful"
)

// SettleStats count what was settled after handlers: the difference
// between the cost a request was decided with and its final cost (0 for a
// response its rule does not count, Rule.Count; or the cost the response
// reported, Rule.CostHeader or a final cost hook).
type SettleStats struct {
	// Refunded is the number of units given back: charged before the
	// handler, not counted after it.
	Refunded uint64
	// Charged is the number of units charged beyond the cost decided: the
	// overdraft of responses that reported more. An overdraft is never
	// refused: the next decisions see it.
	Charged uint64
	// BadReports counts reported costs that were ignored (the cost decided
	// before the handler stands): a cost header whose value is not a
	// decimal integer in [0, shardlimit.MaxLimit], or a final cost hook
	// returning a number outside that range.
	BadReports uint64
	// Errors counts settlements the limiter refused (the rule's limiter
	// closed by a reload or Close while the handler ran, or a store
	// error of a limiter of Options.NewLimiter's).
	Errors uint64
}

// Add adds o's counts to s.
func (s *SettleStats) Add(o SettleStats) {
	s.Refunded += o.Refunded
	s.Charged += o.Charged
	s.BadReports += o.BadReports
	s.Errors += o.Errors
}

// Counts reports whether a response that failed (or not) counts under c.
func (c CountOutcome) Counts(failed bool) bool {
	switch c {
	case CountFailed:
		return failed
	case CountSuccessful:
		return !failed
	}
	return true
}

// Settles reports whether the decisions of rule ru are settled after the
// handler whatever the middleware's hooks: it counts only some outcomes
// (Count) or reads its final cost from a response header (CostHeader).
func (ru *Rule) Settles() bool {
	return (ru.Count != "" && ru.Count != CountAll) || ru.CostHeader != ""
}

// reservedCostHeaders are the fields a cost header may not name: those the
// middleware writes, and those that frame the response, which removing
// would break it.
var reservedCostHeaders = []string{
	"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset",
	"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Window-Ms",
	"X-Ratelimit-Strategy", "Retry-After",
	"Content-Length", "Content-Type", "Content-Encoding", "Transfer-Encoding",
	"Connection", "Trailer", "Date", "Server", "Set-Cookie", "Location",
}

// checkOutcome checks ru's Count and CostHeader.
func checkOutcome(ru *Rule) error {
	switch ru.Count {
	case "", CountAll, CountFailed, CountSuccessful:
	default:
		return fmt.Errorf("count %q is none of %q, %q and %q", ru.Count, CountAll, CountFailed, CountSuccessful)
	}
	if ru.Shadow && (ru.Count != "" && ru.Count != CountAll || ru.CostHeader != "") {
		// A shadow decision is not settled after the handler: refusing
		// the fields beats counting what they say not to count.
		return fmt.Errorf("a shadow rule counts every response at the cost decided: count %q and cost header %q are not supported on it", ru.Count, ru.CostHeader)
	}
	h := ru.CostHeader
	if h == "" {
		return nil
	}
	if !isToken(h) {
		return fmt.Errorf("cost header %q is not a field name", h)
	}
	c := textproto.CanonicalMIMEHeaderKey(h)
	for _, r := range reservedCostHeaders {
		if c == r {
			return fmt.Errorf("cost header %q names a field the middleware writes or the response needs", h)
		}
	}
	return nil
}

// checkFileOutcome checks the "count" and "cost_header" of rule what, as
// a rules file gives them: as checkOutcome does, and the header's name
// against MaxNameBytes.
func checkFileOutcome(what string, ru *Rule) error {
	if len(ru.CostHeader) > MaxNameBytes {
		return fmt.Errorf("%w: %s: cost header of %d bytes, longer than the %d (MaxNameBytes) a rules file accepts",
			shardlimit.ErrInvalidConfig, what, len(ru.CostHeader), MaxNameBytes)
	}
	if err := checkOutcome(ru); err != nil {
		return fmt.Errorf("%w: %s: %v", shardlimit.ErrInvalidConfig, what, err)
	}
	return nil
}
