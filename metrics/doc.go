// Package metrics describes shardlimit's counters as metric families and
// reads them when asked, for exporters and status pages. It adds no work
// to decisions: every value is a counter the limiters and middlewares keep
// anyway (shardlimit.Stats, httplimit.RuleStats, sync.SharedStats,
// sync.ExactStats), read at collection time.
//
// Two exporters, in modules of their own so that this module keeps its few
// dependencies, turn the families into their metrics:
//
//	github.com/shardlimit/shardlimit/exporters/shardlimitprom  a prometheus.Collector (prometheus/client_golang)
//	github.com/shardlimit/shardlimit/exporters/shardlimitotel  OpenTelemetry asynchronous instruments
//
// WriteText writes the Prometheus text format without either, as the demo
// server does for its /metrics.
//
// Sources are limiters, each named by the caller (Limiter), and HTTP
// middlewares, whose rules are named by the rule set (Middleware). Every
// family is labelled by limiter (the limiter's or the rule's name); some
// add outcome, kind, algorithm or store. No label ever holds a client key:
// one series per client would grow without bound. Who is being limited is
// what the middlewares' TopDenied method reports instead: a fixed-size
// summary of the most-denied clients, whose members change as traffic
// does, with estimated counts, which a status page can show (the demo's
// /status does) but a time series database should not store, since every
// client passing through the list would leave a series behind.
//
// The families (Families lists them with their help text):
//
//	shardlimit_limiter_info{limiter,algorithm,store}        1 per limiter: algorithm; store local, shared or exact
//	shardlimit_limit{limiter}                               default limit, units per window
//	shardlimit_window_seconds{limiter}                      window
//	shardlimit_decisions_total{limiter,outcome}             decisions of positive cost: allowed, denied, would_deny (dry run, shadow rule)
//	shardlimit_errors_total{limiter,kind}                   middleware requests not decided: too_many_keys, invalid, closed, other, bad_cost, no_identity
//	shardlimit_keys{limiter}                                client keys stored
//	shardlimit_keys_evicted_total{limiter}                  keys evicted (idle, or to make room)
//	shardlimit_keys_refused_total{limiter}                  new keys a full table refused
//	shardlimit_store_healthy{limiter}                       sync limiters: 1 while the store answers
//	shardlimit_store_trips_total, _recoveries_total         sync limiters: state changes
//	shardlimit_store_policy_share{limiter}                  sync limiters: share of the last health interval's work the failure policy decided (degraded above 0.1)
//	shardlimit_shared_*                                     sync.Shared: flushes, items, flush duration and gap, units sent, retried, unknown, dropped, pending keys, clock offset
//	shardlimit_exact_*                                      sync.Exact: calls, errors, timeouts, policy decisions, deny cache hits, probes, journal, replays, units lost
//	shardlimit_group_rules{limiter}                         grouped middleware (WithGroup): rules in the group
//
// # How many series
//
// Every number below is checked by the package's tests. A Limiter source
// emits 8 series: info, limit, window, two of decisions (allowed and
// denied), keys, evicted and refused. A sync.Shared limiter adds 24 (the
// store and shared families), a sync.Exact one 22 (the store and exact
// families). A Middleware emits, per rule, those of its limiter and six of
// errors: 14 series per rule for a limiter in memory, 38 for a
// sync.Shared, 36 for a sync.Exact. So a middleware of R rules in memory
// emits 14*R series; with Redis, 38*S + 36*E for S Shared and E Exact
// rules. In the text format a series is a line of about 60 bytes (rule
// names of 10): the demo's /metrics with 1,000 rules is 0.85 MB in memory
// and 2 MB with Redis (a quarter of the rules sync.Exact), and every scrape
// stores every series again. Measured with 10,000 rules, half sync.Shared
// and half sync.Exact (bench/results/idle.md): 355,000 series, 18 MB, and
// 0.07-0.2 s of CPU per scrape on a loaded 2-core machine, about 160
// bytes of garbage per series; grouped with WithGroup(AllRules), 52
// series and 11 KB, though collecting still reads every rule's counters
// (about the same CPU per scrape).
//
// Middleware(m, WithGroup(group)) bounds this: the rules of one group are
// summed into one series set (see WithGroup for how each family
// combines), and a middleware emits, per group, 15 series for rules in
// memory of one algorithm, limit and window (the 14 above and
// shardlimit_group_rules), plus one info series for each further
// algorithm and store among its rules, minus limit and window where its
// rules differ in them, plus 24 if any of its rules is a sync.Shared and
// 22 if any is a sync.Exact, only 15 of them if it has a sync.Shared too
// (the 7 store families are common to both): at most 65 series per group,
// whatever the number of rules. WithGroup(AllRules) reports a middleware
// as one group; ByTier as one group per client tier and one for the
// default rules; a function of the user's may keep the few rules worth
// watching apart (returning "" for them) and group the rest.
package metrics
