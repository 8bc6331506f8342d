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
// Each request is matched to at most one enforced rule (see Rule for the
// order) and limited by that rule's limiter, one per rule, keyed by client;
// a request no rule matches passes untouched (see Policies for exempt and
// deny lists and shadow rules). A rule gives one limit per window, or
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
// # Policies
//
// Beside limits, a rule set says whom not to limit and whom to refuse, and
// can try a limit without enforcing it:
//
//	{
//	  "rules": [
//	    {"name": "api", "prefix": "/api", "limit": 100, "window": "1m",
//	     "exempt": {"clients": ["batch-job"]}, "deny": {"networks": ["198.51.100.0/24"]}},
//	    {"name": "api-try", "prefix": "/api", "limit": 60, "window": "1m", "shadow": true}
//	  ],
//	  "exempt": {"networks": ["10.0.0.0/8", "127.0.0.1"]},
//	  "deny":   {"clients": ["leaked-key"], "networks": ["203.0.113.0/24"]}
//	}
//
// A request is decided in this order: the rule set's deny list (Rules.Deny:
// 403 Forbidden on every route behind the middleware, limited or not),
// its exempt list (Rules.Exempt: the request passes, uncounted by every
// rule, shadow rules too); then its tier (a middleware's tier hook, else
// its identity, else its network) and its rules: the enforced rule it
// matches, whose own deny and exempt lists (Rule.Deny, Rule.Exempt) come
// before its limit, and, apart, the shadow rule it matches (Rule.Shadow),
// which decides and counts the request whatever the enforced rule
// answered but never answers it. A client is on a list if its identity, as
// the request gives it (KeyConfig.Header or the key function; listed in a
// tier or not), is among the list's Clients, or its client address (after
// KeyConfig.TrustedProxies) is in one of its Networks.
//
// An exempt request gets no rate-limit field (ActionExempt); a denied one
// is answered 403 Forbidden, text/plain, "Forbidden: this client is denied
// access (deny list).", with no rate-limit field and no Retry-After
// (ActionDenyListed; the middlewares' Denied hooks answer 429s only), and
// handed to Options.OnDenied with Decision.Listed set. Neither asks a
// limiter, so neither is counted against the client. Under Options.DryRun
// a denied client passes, counted as a would-denial.
//
// Lists cannot contradict one another: Validate refuses a client that is
// both exempt and denied where both lists apply (the rule set's two
// lists; a rule's two; a rule's and the rule set's other one): the same
// identity on both, or an exempt and a deny network sharing any address,
// one inside the other (an exempt 10.1.2.3 under a denied 10.0.0.0/8
// included: lists hold no exceptions to one another). An IPv4-mapped IPv6
// network counts as the IPv4 one it maps; IPv4 and IPv6 networks never
// overlap. Lists of two different rules may name the same client.
//
// Lookups do not allocate: identities are in a map, networks in a table
// of sorted, merged address ranges searched by binary search (about 27 ns
// among 10,000 networks, against 77 us for a scan; see
// internal/netprefix's benchmarks). A rules file lists at most
// MaxListEntries entries. Lists are part of the rule set, so a reload
// swaps them with the rules, atomically for requests.
//
// Shadow rules are matched as enforced rules are (within the request's
// tier, then among the default rules), but only among themselves, so one
// route can have one enforced and one shadow rule; a shadow rule alone on
// its route is fine. A shadow rule's counters are its limiter's
// (RuleStats.Stats: Denied counts its would-denials; RuleStats.Shadow is
// set), summed in Stats.ShadowAllowed and ShadowWouldDeny and reported as
// outcome would_deny by package metrics; Stats.Allowed and Denied count
// enforced rules only. Turning a shadow rule into an enforced one keeps its
// limiter and counters (its name, algorithm and windows unchanged).
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
// # Settling after the handler
//
// Every request is decided before its handler runs, at its cost then
// (1, or the middleware's Cost hook), so a client at its limit is denied
// without running the handler. A rule may ask to settle an admitted
// request once its handler has returned:
//
//   - Rule.Count CountFailed counts only failed responses (status >= 400,
//     or what Options.FailedResponse says), CountSuccessful only the
//     others: a response that does not count is refunded, its whole cost
//     given back.
//   - Rule.CostHeader names a response header in which the handler
//     reports the request's final cost (say the tokens an LLM answer
//     took); the middlewares' FinalCost hooks compute it in Go instead.
//     The difference to the cost decided is charged (an overdraft: taken,
//     never refused, and seen by the next decisions) or refunded. The
//     header is removed from the response, so it never reaches the
//     client; it may be set at any time before the handler returns (with
//     net/http, after the body too). A value that is not a decimal
//     integer in [0, shardlimit.MaxLimit], or a hook's result outside it,
//     is ignored and counted (SettleStats.BadReports).
//
// The settlement goes to the rule limiter's Settle, at the instant the
// request was decided at, for every limit of the rule (a refund never
// takes a key's usage below zero, and gives back only as much as later
// decisions allow: see shardlimit.Limiter's Settle). RuleStats.Settled and
// Stats.Settled count the units refunded and charged.
//
// A handler that panics (net/http's http.ErrAbortHandler too) is settled
// as a response of status 500 with no reported cost, before its panic goes
// on (net/http's server recovers it and closes the connection; fasthttp's
// server does not recover panics). Under CountFailed it counts, under
// CountSuccessful it is refunded.
//
// The response's rate-limit fields describe the decision made before the
// handler: X-RateLimit-Remaining is what remained after the cost decided,
// not after the settlement, which the next response shows.
//
// Counting by outcome is strict on purpose: requests in flight count
// until their handler returns, so a burst of concurrent requests can be
// denied at the limit even though most of them would later be refunded
// (under CountFailed, a client sending L slow requests at once is denied
// an (L+1)th until one of them finishes, however they end). The other
// way round, admitting first and counting after, would let a burst of
// any size through before its failures were counted. Likewise an
// overdraft is only seen by the decisions after it: a client may go over
// its limit by the final cost of the requests it has in flight.
//
// # Bans and concurrency limits
//
// A rule may ban a client after repeated denials (Rule.Ban, "ban" in
// JSON): after After denials within Within, the client is refused on the
// rule for For (growing on repeat offences up to Max) with 429, the
// rate-limit fields with Remaining 0, and Retry-After the later of the
// ban's end and the limiter's own wait (a Peek, consuming nothing), so a
// retry after it is admitted unless another denial arises. The middlewares' Bans, SetBan and
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
