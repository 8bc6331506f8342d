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
	// ActionExempt: the client is on an exempt list (Rules.Exempt, or the
	// matched rule's Exempt); the request went to the next handler
	// uncounted, with no rate-limit field.
	ActionExempt
	// ActionDenyListed: the client is on a deny list (Rules.Deny, or the
	// matched rule's Deny); answered 403 Forbidden, uncounted, with no
	// rate-limit field. Under Options.DryRun such a request passes as
	// ActionDryRunDeny with Listed set.
	ActionDenyListed
	// ActionBanned: the client is banned on the rule (Rule.Ban); answered
	// 429 (or handed to the Denied hook), nothing consumed. Result holds
	// Allowed false, Limit the rule's, Remaining 0, ResetAfter the rest
	// of the ban, and RetryAfter the later of the ban's end and the
	// limiter's own wait for the request (a Peek of its key, which
	// consumes nothing; Never if no wait can admit it), so that a retry
	// after RetryAfter is admitted unless another denial arises.
	ActionBanned
	// ActionTooManyInFlight: the client had Rule.Concurrency's limit of
	// requests in flight; answered with the Concurrency's status and
	// Retry-After, nothing consumed. Result is zero but for Limit (the
	// concurrency limit) and RetryAfter.
	ActionTooManyInFlight
)

// String returns the action's name: "no_rule", "allow", "deny",
// "dry_run_deny", "bad_cost", "no_identity", "fail_closed", "fail_open",
// "exempt", "deny_listed", "banned" or "too_many_in_flight".
func (a Action) String() string {
	return enumName(uint8(a), "Action", "no_rule", "allow", "deny", "dry_run_deny",
		"bad_cost", "no_identity", "fail_closed", "fail_open", "exempt", "deny_listed",
		"banned", "too_many_in_flight")
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
	// or nothing was decided (ActionBadCost, ActionNoIdentity,
	// ActionExempt, ActionDenyListed).
	Result shardlimit.Result
	// Listed reports that a deny list, not a limit, denied the request
	// (ActionDenyListed, or ActionDryRunDeny under DryRun). Rule is then
	// the rule whose list it was, "" for the rule set's.
	Listed bool
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
	// Rules is the number of rules in force, shadow rules included.
	Rules int

	// Exempt counts requests let through uncounted by an exempt list;
	// DenyListed those refused with 403 by a deny list (or let through
	// as would-denials under DryRun, also counted in WouldDeny). Since the
	// middleware was built.
	Exempt, DenyListed uint64
	// ShadowAllowed and ShadowWouldDeny are the decisions of positive cost
	// of the shadow rules in force (Rule.Shadow), summed as Allowed and
	// Denied are, which count only the enforced rules: what the shadow
	// rules would have admitted and denied. A shadow rule's list denials
	// count in DenyListed, not here.
	ShadowAllowed, ShadowWouldDeny uint64
	// UnknownTier counts requests whose tier hook named a tier the rules
	// in force lack; they were matched as if the hook had named none.
	UnknownTier uint64
	// Settled sums what was settled after handlers over the rules in
	// force (see RuleStats.Settled).
	Settled SettleStats
}

// RuleStats describe one rule in force: what it limits, and its counters.
// The counters are its limiter's, so they count since that limiter was
// built and survive every reload that keeps it (see "Reloading rules").
type RuleStats struct {
	// Name and Tier name the rule and its tier ("" for the default rules).
	Name, Tier string
	// Path is the exact path the rule matches, or the path prefix if
	// Prefix is true.
	Path   string
	Prefix bool
	// Methods are the request methods the rule applies to, upper case;
	// empty for every method.
	Methods []string
	// Algorithm, Limit (units per window for clients without an override),
	// Window and Buckets (SlidingCounter only, else 0) are the rule's; for a
	// rule of several limits, Limit and Window are its longest window's and
	// Limits lists them all, shortest window first.
	Algorithm shardlimit.Algorithm
	Limit     int
	Window    time.Duration
	Limits    []Rate
	Buckets   int
	// DryRun reports that the rule's denials were let through
	// (Options.DryRun): Stats.Denied then counts requests that would have
	// been denied.
	DryRun bool
	// Stats are the rule's limiter counters (shardlimit.Limiter.Stats):
	// decisions of positive cost allowed and denied, client keys stored,
	// evicted, and refused by a full table.
	Stats shardlimit.Stats
	// Errors count the rule's failed decisions by cause.
	Errors ErrorCounts
	// BadCost counts requests the rule matched that were refused with 500
	// for a negative cost; NoIdentity those refused with 400 under
	// EmptyKeyReject. Neither reached the limiter.
	BadCost, NoIdentity uint64
	// Shadow reports a shadow rule (Rule.Shadow): it answers no request,
	// and Stats.Denied counts its would-denials (in the metrics, outcome
	// would_deny).
	Shadow bool
	// Exempt counts the requests the rule matched that its exempt list let
	// through uncounted; DenyListed those its deny list refused with 403
	// (would-denials on a shadow rule or under DryRun). The rule set's
	// lists count in Stats only.
	Exempt, DenyListed uint64
	// Count and CostHeader are the rule's (CostHeader in canonical form);
	// Settles reports that its admitted requests are settled after the
	// handler: it counts by outcome, reads a cost header, or the
	// middleware has a final cost hook.
	Count      CountOutcome
	CostHeader string
	Settles    bool
	// Settled counts what was settled after the handler of the rule's
	// admitted requests (Rule.Count, Rule.CostHeader, a final cost hook):
	// units refunded and charged beyond the cost decided, reports
	// ignored, settlements refused. Like Stats it belongs to the rule's
	// limiter and survives the reloads that keep it.
	Settled SettleStats
	// Limiter is the rule's limiter, for reading what its own type reports,
	// such as the store state of a limiter from package sync (its
	// SharedStats or ExactStats). The middleware owns it: calling anything
	// that changes it (limits, Reset, Close) has undefined effects on the
	// rule.
	Limiter shardlimit.Limiter
	// KeyPrefix is what the middleware puts before every client key it
	// passes to Limiter: KeyNamespace(Name) for a limiter that
	// Options.NewLimiter built, "" for one the middleware built. A client's
	// state in Limiter is under KeyPrefix + its key ("ip:192.0.2.1").
	KeyPrefix string
	// Ban and Concurrency are copies of the rule's (nil if none).
	Ban         *Ban
	Concurrency *Concurrency
}

// ErrorCounts count the failed decisions of a rule (Result.Err set,
// answered per Options.OnError) by cause.
type ErrorCounts struct {
	// TooManyKeys: the rule's table was full (shardlimit.ErrTooManyKeys).
	TooManyKeys uint64
	// Invalid: the limiter refused the key or the instant
	// (shardlimit.ErrInvalidKey, ErrInvalidTime, ErrInvalidCost).
	Invalid uint64
	// Closed: the rule's limiter was closed (shardlimit.ErrClosed).
	Closed uint64
	// Other: any other error, from a limiter Options.NewLimiter built.
	Other uint64
}

// DeniedKey is one entry of a middleware's TopDenied: a client key and the
// rule that denied it, with the number of its denied requests (those let
// through by DryRun included) since the middleware was built.
//
// The counts come from a Space-Saving summary (Metwally, Agrawal and El
// Abbadi, ICDT 2005) that tracks at most Options.TopDenied pairs in fixed
// memory: a pair that is not tracked takes the place of the least-denied
// one and inherits its count as its error. So with N denials in all and K
// pairs tracked, Count is at least the pair's true number of denials and
// at most Error more (Error <= N/K); Guaranteed, Count-Error, is at most
// the true number.
//
// The pairs listed are the largest set of tracked pairs whose guaranteed
// counts each exceed both what any pair not tracked may have been denied
// (the count of the pair last replaced, at most N/K) and the Count of
// every tracked pair not listed: so each pair listed was certainly denied
// more often than any left out, tracked or not. A flood of clients denied
// once each, more than K of them, lists none: each tracked pair then has
// a count near N/K, an error one less and a guaranteed count of 1, which
// says nothing about it; a client denied far more often than the rest
// amid the flood is listed. A pair denied more than 2N/K times is always
// tracked, but listed only if its guaranteed count also exceeds the
// counts of the tracked pairs below it. Asking for the first n of the
// list (TopDenied(n)) returns those of greatest guaranteed count: each
// was certainly denied more often than any pair outside the full list,
// not necessarily more than the listed pairs cut off.
type DeniedKey struct {
	// Rule is the name of the rule that denied the requests.
	Rule string
	// Key is the client key: "ip:192.0.2.1", "ip:2001:db8::/64",
	// "id:client-1" (see KeyConfig), without the rule's namespace
	// (RuleStats.KeyPrefix).
	Key string
	// Count is the number of denials counted for the pair: at least the
	// true number, at most Error more.
	Count uint64
	// Error bounds how much Count may overestimate.
	Error uint64
}

// Guaranteed returns Count-Error, the number of denials the pair certainly
// had: at most the true number.
func (d DeniedKey) Guaranteed() uint64 { return d.Count - d.Error }
