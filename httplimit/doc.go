// Package httplimit holds what shardlimit's two HTTP middlewares share and
// a user sets or reads: the Options (rules, client keys, response fields,
// algorithm, clock, error policy), the rule sets (Rules, Tier, Rule,
// Override, with their JSON form), and what they report: the Decision of
// each request, their Stats, each rule's RuleStats, and the most-denied
// clients (DeniedKey).
// Package fasthttpmw applies them to github.com/valyala/fasthttp, package
// httpmw to net/http; both embed Options in their Config:
//
//	rules, err := httplimit.LoadRules("rules.json")
//	if err != nil {
//		log.Fatal(err)
//	}
//	mw, err := httpmw.New(httpmw.Config{Options: httplimit.Options{
//		Rules: rules,
//		Keys:  httplimit.KeyConfig{Header: "X-Client-ID"},
//	}})
//
// # Rules
//
// Each request is matched to at most one rule (see Rule for the order) and
// limited by that rule's limiter, one per rule, keyed by client; a request
// no rule matches passes untouched. A rule gives one limit per window, or
// several (Rule.Limits: say 3 per second and 10 per minute), all of which
// must admit a request, which then counts against each. Tiers give listed clients (by identity
// or network) rules of their own, overrides give single clients a limit of
// their own. A rule set must hold at least one rule, unless it says
// Limiting: LimitingOff: a rules file that lost its rules is an error
// (ErrNoRules), never a silent end of every limit. A rules file
// (ParseRules, ReadRules, LoadRules) is also refused for a key given twice
// in any object, for windows under 1 ms (MinFileWindow) and beyond its
// caps (MaxRulesFileBytes and the constants beside it). Each rule's IETF
// policy name is, unless configured, the rule's name (PolicyNameOf).
//
// # Reloading rules
//
// The middlewares' Reload replaces the rules in force at runtime (the demo
// server does it on SIGHUP). It is atomic for requests: each request is
// decided entirely under the old rules or entirely under the new ones, its
// rule, limit and response fields all from one set. An invalid rule set is
// refused with an error and changes nothing.
//
// Counters survive reloads. A rule whose name, algorithm, windows and
// buckets are unchanged keeps its limiter, and so every client's usage; a
// changed limit or override applies to that usage at once. For a rule of
// several limits (Rule.Limits) "windows" is the set of its windows: the
// order of its limits may change, and their numbers, and every counter is
// kept. Adding, removing or changing any one window gives the rule a new
// limiter, whose counters all start from zero, those of the windows that
// stayed too: each client may then spend the new limits in full at once
// (a rule's limits live in one record per client, so no window's counts
// can move to a limiter of other windows). A rule that a reload removes
// (or gives another algorithm, windows or buckets) keeps its limiter
// aside, unused: a later reload that brings back a rule with that name,
// algorithm, windows and buckets gets it back, counters and all. A
// limiter set aside is closed by the first reload that finds every one of
// its clients back to a fresh client's state (at most one window, the
// longest, after the rule's last request: from then on the counters it
// holds equal fresh ones), and by Close.
//
// In a store that limiters of Options.NewLimiter share (Redis, through
// package sync), each rule's counters are under keys of the rule's own
// namespace, KeyNamespace(name), whatever the factory's Prefix: rules
// never count one another's requests. A rule's keys there depend on its
// name alone, not on its place among the rules: a renamed rule starts from
// zero.
//
// # Client keys
//
// By default clients are keyed by address (see KeyConfig). A client
// identity (KeyConfig.Header, or the middleware's key function) is whatever
// the request says: any client can send any X-Client-ID. By default
// (UnknownIdentityAnonymous) an identity that no tier or override lists is
// ignored and the request is keyed like one without identity, by its
// address, so made-up identities buy no budget; but a client that sends a
// listed identity still gets that client's tier. Use identities as keys
// (UnknownIdentityOwnKey), or tiers that raise limits, only when they are
// authenticated before the middleware: an API key validated upstream, or a
// key function that reads an authenticated principal.
//
// # Responses
//
// An admitted request gets the rate-limit fields HeaderConfig selects (by
// default X-RateLimit-Limit, -Remaining and -Reset) and goes to the next
// handler. A denied one is answered 429 Too Many Requests with those fields,
// Retry-After (unless HeaderConfig.OmitRetryAfter, or when no wait can
// succeed), Content-Type text/plain, X-Content-Type-Options nosniff and a
// one-line body such as "Too Many Requests: limit of 10 per 60 s reached;
// retry in 57 s." (or handed to the middleware's Denied hook). The other
// answers, with the same text/plain headers and no rate-limit field: 500
// for a negative request cost, 400 for a missing identity under
// EmptyKeyReject, 503 for a failed decision under FailClosed.
//
// # Bans and concurrency limits
//
// A rule may ban a client after repeated denials (Rule.Ban, "ban" in
// JSON): after After denials within Within, the client is refused on the
// rule for For (growing on repeat offences up to Max) with 429, the
// rate-limit fields with Remaining 0, and Retry-After the rest of the
// ban, without asking the limiter. The middlewares' Bans, SetBan and
// LiftBan list, set and lift bans; with Options.BanStore (package sync's
// NewBanStore keeps them in Redis) a ban started, set or lifted on one
// node is enforced by every node within Options.BanSyncInterval plus two
// store round trips, and a restarted node enforces the bans in force
// from its first read of the store. A rule may also cap the requests a
// client has in flight (Rule.Concurrency, "concurrency" in JSON), per
// process: 429 or 503 with the Retry-After it sets. Both keep their state
// in capped tables (Options.MaxPolicyKeys) that a flood of clients cannot
// grow; PolicyStats counts what a full table refused.
package httplimit
