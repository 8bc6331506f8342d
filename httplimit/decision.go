package httplimit

import (
	"time"

	"github.com/shardlimit/shardlimit"
)

// Action is what the middleware did with a request.
type Action uint8

const (
	// ActionNoRule: no rule matched (or limiting is off); the request went
	// to the next handler with no rate-limit field.
	ActionNoRule Action = iota
	// ActionAllow: admitted; the fields were written and the next handler
	// called.
	ActionAllow
	// ActionDeny: denied; the fields were written and the request answered
	// 429 Too Many Requests (or handed to the middleware's Denied hook).
	ActionDeny
	// ActionDryRunDeny: denied, but let through to the next handler by
	// Options.DryRun; the fields were written, without Retry-After.
	ActionDryRunDeny
	// ActionBadCost: the cost function returned a negative cost; answered
	// 500 Internal Server Error, nothing consumed.
	ActionBadCost
	// ActionNoIdentity: no client identity (or an unlisted one under
	// UnknownIdentityAnonymous) under EmptyKeyReject; answered 400 Bad
	// Request, nothing consumed.
	ActionNoIdentity
	// ActionFailClosed: the decision failed (Decision.Result.Err) under
	// FailClosed; answered 503 Service Unavailable.
	ActionFailClosed
	// ActionFailOpen: the decision failed under FailOpen; the request went
	// to the next handler with no rate-limit field.
	ActionFailOpen
)

// String returns the action's name: "no_rule", "allow", "deny",
// "dry_run_deny", "bad_cost", "no_identity", "fail_closed" or "fail_open".
func (a Action) String() string {
	return enumName(uint8(a), "Action", "no_rule", "allow", "deny", "dry_run_deny",
		"bad_cost", "no_identity", "fail_closed", "fail_open")
}

// Decision is the outcome of one request: what the middleware did, the rule
// that matched and the limiter's Result. It is passed by value to
// Options.OnDenied and to the middlewares' Denied hooks.
type Decision struct {
	// Action is what the middleware did with the request.
	Action Action
	// Rule and Tier name the matched rule and its tier ("" for the default
	// rules). Both are empty when no rule matched.
	Rule, Tier string
	// Algorithm is the matched rule's algorithm.
	Algorithm shardlimit.Algorithm
	// Window is the window of the matched rule's limit that Result
	// reports: the rule's window, or for a rule of several limits the
	// binding one's (Result.Window; the longest window when nothing was
	// decided).
	Window time.Duration
	// Cost is the request's cost in units (1 without a cost function).
	Cost int
	// Time is the instant the request was decided at: the middleware
	// clock's Now when the middleware ran.
	Time time.Time
	// Result is the limiter's decision: Result.Limit is the key's limit
	// (its override, if any; for a rule of several limits the binding
	// one's), Result.RetryAfter the exact wait before the same request
	// would be admitted by every limit (shardlimit.Never if none can be).
	// Result.Err is set when the decision failed. Zero when no rule matched
	// or nothing was decided (ActionBadCost, ActionNoIdentity).
	Result shardlimit.Result
}

// Stats are a middleware's counters. Allowed, Denied and Keys are summed over
// the limiters of the rules in force (a rule that a reload removes or gives
// a new limiter takes its counts with it); the others count since the
// middleware was built.
type Stats struct {
	// Allowed and Denied count decisions of positive cost; Denied includes
	// denials let through by DryRun.
	Allowed, Denied uint64
	// WouldDeny counts denials let through by DryRun.
	WouldDeny uint64
	// Errors counts failed decisions (Result.Err), handled per OnError.
	Errors uint64
	// BadCost counts requests refused with 500 for a negative cost.
	BadCost uint64
	// NoIdentity counts requests refused with 400 under EmptyKeyReject.
	NoIdentity uint64
	// Keys is the number of client keys stored over all rules in force.
	Keys int
	// Rules is the number of rules in force.
	Rules int
}
