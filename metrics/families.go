package metrics

import shardsync "github.com/shardlimit/shardlimit/sync"

// Type is a metric family's type.
type Type uint8

const (
	// Counter is a cumulative count that only goes up (back to 0 when its
	// limiter is replaced).
	Counter Type = iota + 1
	// Gauge is a value that goes up and down.
	Gauge
)

// String returns "counter" or "gauge", the names of the Prometheus text
// format's TYPE lines.
func (t Type) String() string {
	switch t {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	}
	return "untyped"
}

// Family describes one metric family. Families are fixed: Families returns
// every one this package can report, and Collect reports samples of them
// only.
type Family struct {
	// Name is the Prometheus name: "shardlimit_", the subject, the base
	// unit if any ("_seconds") and "_total" for counters.
	Name string
	// Help is the one-line description of the HELP line.
	Help string
	// Type is Counter or Gauge.
	Type Type
	// Unit is the unit in UCUM form, as OpenTelemetry instruments take it:
	// "s" for seconds, an annotation such as "{decision}" for counts of
	// things, "" for none.
	Unit string
	// Labels are the label names, in the order Sample.Labels gives their
	// values. Every family has "limiter" first: the limiter's name, or for
	// HTTP middleware the rule's. No label ever holds a client key.
	Labels []string

	text int // its position in textFamilies
}

// The labels.
const (
	labelLimiter   = "limiter"
	labelOutcome   = "outcome"
	labelKind      = "kind"
	labelAlgorithm = "algorithm"
	labelStore     = "store"
)

// family returns a family labelled by limiter and then extra.
func family(name string, typ Type, unit, help string, extra ...string) *Family {
	return &Family{Name: name, Help: help, Type: typ, Unit: unit, Labels: append([]string{labelLimiter}, extra...)}
}

// The families every limiter reports, and those of HTTP middleware rules.
var (
	limiterInfo = family("shardlimit_limiter_info", Gauge, "",
		"Always 1: a limiter (for HTTP middleware, a rule, or a group of rules with one series for each algorithm and store among them) with its algorithm and where its counts live: local (this process), shared (sync.Shared: this process, shared through a store) or exact (sync.Exact: the store).",
		labelAlgorithm, labelStore)
	limit = family("shardlimit_limit", Gauge, "{unit}",
		"Default limit of the limiter's keys (those without a limit of their own), in requests or cost units per window.")
	window = family("shardlimit_window_seconds", Gauge, "s",
		"Window of the limiter's limit, in seconds.")
	decisions = family("shardlimit_decisions_total", Counter, "{decision}",
		"Rate-limit decisions of positive cost, by outcome: allowed, denied, or would_deny (denied, but let through by the middleware's dry run, or by a rule in shadow).",
		labelOutcome)
	errorsTotal = family("shardlimit_errors_total", Counter, "{request}",
		"Requests an HTTP middleware rule matched but did not decide, by kind: too_many_keys (the rule's table was full), invalid (key or instant refused), closed (limiter closed), other (the limiter's own error), answered per the error policy; bad_cost (negative cost, answered 500); no_identity (no client identity, answered 400).",
		labelKind)
	settledUnits = family("shardlimit_settled_units_total", Counter, "{unit}",
		"Units settled after the handler by an HTTP middleware rule that counts by outcome or takes a final cost (reported for those rules only), by kind: refunded (charged before the handler, not counted after it), charged (an overdraft beyond the cost decided).",
		labelKind)
	settleProblems = family("shardlimit_settle_problems_total", Counter, "{request}",
		"Settlements after the handler of an HTTP middleware rule that went wrong (reported for rules that settle only), by kind: bad_report (a reported final cost that is not one, ignored), refused (the limiter refused the settlement).",
		labelKind)
	keys = family("shardlimit_keys", Gauge, "{key}",
		"Client keys the limiter stores now (for sync.Exact, its local fallback's).")
	keysEvicted = family("shardlimit_keys_evicted_total", Counter, "{key}",
		"Client keys removed from the limiter's table: idle ones by the janitor, or to make room in a full table.")
	groupRules = family("shardlimit_group_rules", Gauge, "{rule}",
		"Rules of an HTTP middleware that the group named by the limiter label sums (metrics.WithGroup); reported for groups only.")
	keysRefused = family("shardlimit_keys_refused_total", Counter, "{decision}",
		"Decisions for a new client key that the full table could not store (refused with ErrTooManyKeys).")
)

// row reads one family's value from a T.
type row[T any] struct {
	f *Family
	v func(*T) float64
}

// The families of a store that limiters of package sync share their
// counts through. Each row reads a field of SharedStats or ExactStats (the
// metrics tests list which field each row reads, and which fields are not
// numbers: LastError is shown by the demo's /status, Eviction's policy and
// error by the limiter's log).
var (
	storeHealthy = family("shardlimit_store_healthy", Gauge, "",
		"1 while the limiter's store (Redis) answers, 0 while it is degraded and the failure policy decides.")
	storeTrips = family("shardlimit_store_trips_total", Counter, "{change}",
		"Changes of the store's state from healthy to degraded.")
	storeRecoveries = family("shardlimit_store_recoveries_total", Counter, "{change}",
		"Changes of the store's state from degraded to healthy.")
	storeBadReplies = family("shardlimit_store_bad_replies_total", Counter, "{reply}",
		"Replies of the store that could not be read (wrong type, shape or range): decided as during an outage.")
	storeEvicting = family("shardlimit_store_evicting", Gauge, "",
		"1 while the store evicts keys (its evicted_keys grew between the last two checks): the limiter is then degraded, since an evicted counter reads as a fresh budget.")
	storeEvicted = family("shardlimit_store_evicted_keys_total", Counter, "{key}",
		"Keys the store evicted while this limiter watched it (growth of INFO evicted_keys).")
	storePolicyShare = family("shardlimit_store_policy_share", Gauge, "",
		"Share of the limiter's work in its last whole health interval that its failure policy decided, 0 to 1: for sync.Exact its decisions whose store call failed, timed out or got an unreadable reply (or that it made while degraded); for sync.Shared the items of its flushes the store did not apply. Above 0.1 of at least 20 the limiter is degraded; below 0.05 for a whole interval it is healthy again.")
)

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func healthy(s shardsync.State) float64 {
	if s == shardsync.Healthy {
		return 1
	}
	return 0
}

// sharedRows are the families of a sync.Shared limiter.
var sharedRows = []row[shardsync.SharedStats]{
	{storeHealthy, func(s *shardsync.SharedStats) float64 { return healthy(s.State) }},
	{storeTrips, func(s *shardsync.SharedStats) float64 { return float64(s.Trips) }},
	{storeRecoveries, func(s *shardsync.SharedStats) float64 { return float64(s.Recoveries) }},
	{family("shardlimit_shared_flushes_total", Counter, "{flush}",
		"Flushes that sent at least one item to the store."),
		func(s *shardsync.SharedStats) float64 { return float64(s.Flushes) }},
	{family("shardlimit_shared_flushes_failed_total", Counter, "{flush}",
		"Flushes of which the store applied no item."),
		func(s *shardsync.SharedStats) float64 { return float64(s.FailedFlushes) }},
	{family("shardlimit_shared_items_total", Counter, "{item}",
		"Items sent to the store, one per key and bucket flushed."),
		func(s *shardsync.SharedStats) float64 { return float64(s.Items) }},
	{family("shardlimit_shared_item_errors_total", Counter, "{item}",
		"Items sent to the store that it did not apply."),
		func(s *shardsync.SharedStats) float64 { return float64(s.ItemErrors) }},
	{family("shardlimit_shared_flush_keys", Gauge, "{key}",
		"Keys in the last flush."),
		func(s *shardsync.SharedStats) float64 { return float64(s.LastKeys) }},
	{family("shardlimit_shared_flush_duration_seconds", Gauge, "s",
		"Duration of the last flush, in seconds."),
		func(s *shardsync.SharedStats) float64 { return s.LastLatency.Seconds() }},
	{family("shardlimit_shared_flush_duration_max_seconds", Gauge, "s",
		"Duration of the longest flush so far, in seconds."),
		func(s *shardsync.SharedStats) float64 { return s.MaxLatency.Seconds() }},
	{family("shardlimit_shared_flush_gap_max_seconds", Gauge, "s",
		"Longest time between the starts of two flushes while healthy, in seconds: the flush interval plus the flush between and any lateness of the timer. Other nodes' counts reach this one at most about twice this late."),
		func(s *shardsync.SharedStats) float64 { return s.MaxFlushGap.Seconds() }},
	{family("shardlimit_shared_units_sent_total", Counter, "{unit}",
		"Admitted units (requests or cost units) sent to the store and applied."),
		func(s *shardsync.SharedStats) float64 { return float64(s.SentUnits) }},
	{family("shardlimit_shared_units_retried_total", Counter, "{unit}",
		"Units that provably did not reach the store, sent again later."),
		func(s *shardsync.SharedStats) float64 { return float64(s.RetriedUnits) }},
	{family("shardlimit_shared_units_unknown_total", Counter, "{unit}",
		"Units whose reply from the store was lost; the next flush heals the count."),
		func(s *shardsync.SharedStats) float64 { return float64(s.UnknownUnits) }},
	{family("shardlimit_shared_units_lost_total", Counter, "{unit}",
		"Other nodes' units this node had read in a live window or bucket that the store later answered without (it lost them); this node keeps counting them."),
		func(s *shardsync.SharedStats) float64 { return float64(s.LostUnits) }},
	{family("shardlimit_shared_losses_total", Counter, "{item}",
		"Flush items whose reply showed such a loss; each turns the limiter Degraded with ErrEvicting for an EvictionCheck."),
		func(s *shardsync.SharedStats) float64 { return float64(s.Losses) }},
	{family("shardlimit_shared_units_dropped_total", Counter, "{unit}",
		"Units never sent because their bucket ended (or their key was evicted) before they could be: the other nodes never saw them."),
		func(s *shardsync.SharedStats) float64 { return float64(s.DroppedUnits) }},
	{family("shardlimit_shared_pending_keys", Gauge, "{key}",
		"Keys waiting for the next flush."),
		func(s *shardsync.SharedStats) float64 { return float64(s.Pending) }},
	{family("shardlimit_shared_clock_offset_seconds", Gauge, "s",
		"The store's clock minus this process's, last measured, in seconds."),
		func(s *shardsync.SharedStats) float64 { return s.ClockOffset.Seconds() }},
	{family("shardlimit_shared_near_keys", Gauge, "{key}",
		"Keys of the last flush read because they were near their limit, decided since the flush before or not."),
		func(s *shardsync.SharedStats) float64 { return float64(s.NearKeys) }},
	{storeBadReplies, func(s *shardsync.SharedStats) float64 { return float64(s.BadReplies) }},
	{storeEvicting, func(s *shardsync.SharedStats) float64 { return boolGauge(s.Eviction.Evicting) }},
	{storeEvicted, func(s *shardsync.SharedStats) float64 { return float64(s.Eviction.Evicted) }},
	{storePolicyShare, func(s *shardsync.SharedStats) float64 { return s.PolicyShare }},
}

// exactRows are the families of a sync.Exact limiter.
var exactRows = []row[shardsync.ExactStats]{
	{storeHealthy, func(s *shardsync.ExactStats) float64 { return healthy(s.State) }},
	{storeTrips, func(s *shardsync.ExactStats) float64 { return float64(s.Trips) }},
	{storeRecoveries, func(s *shardsync.ExactStats) float64 { return float64(s.Recoveries) }},
	{family("shardlimit_exact_calls_total", Counter, "{call}",
		"Decision scripts sent to the store."),
		func(s *shardsync.ExactStats) float64 { return float64(s.Calls) }},
	{family("shardlimit_exact_call_errors_total", Counter, "{call}",
		"Decision scripts that failed, timeouts included."),
		func(s *shardsync.ExactStats) float64 { return float64(s.Errors) }},
	{family("shardlimit_exact_call_timeouts_total", Counter, "{call}",
		"Decision scripts that timed out."),
		func(s *shardsync.ExactStats) float64 { return float64(s.Timeouts) }},
	{family("shardlimit_exact_policy_decisions_total", Counter, "{decision}",
		"Decisions made by the failure policy (the local fallback, fail open or fail closed) instead of the store."),
		func(s *shardsync.ExactStats) float64 { return float64(s.PolicyDecisions) }},
	{family("shardlimit_exact_probes_total", Counter, "{probe}",
		"Reconnect probes sent to the store while degraded."),
		func(s *shardsync.ExactStats) float64 { return float64(s.Probes) }},
	{family("shardlimit_exact_probe_failures_total", Counter, "{probe}",
		"Reconnect probes that failed."),
		func(s *shardsync.ExactStats) float64 { return float64(s.ProbeFailures) }},
	{family("shardlimit_exact_journal_keys", Gauge, "{key}",
		"Keys in the journal of units this process was granted that still count."),
		func(s *shardsync.ExactStats) float64 { return float64(s.JournalKeys) }},
	{family("shardlimit_exact_journal_full_total", Counter, "{decision}",
		"Grants the full journal could not record."),
		func(s *shardsync.ExactStats) float64 { return float64(s.JournalFull) }},
	{family("shardlimit_exact_replays_total", Counter, "{replay}",
		"Replays of the journal to the store after an outage, eviction or restart."),
		func(s *shardsync.ExactStats) float64 { return float64(s.Replays) }},
	{family("shardlimit_exact_replay_failures_total", Counter, "{replay}",
		"Replays that failed (their units are sent again)."),
		func(s *shardsync.ExactStats) float64 { return float64(s.ReplayFailures) }},
	{family("shardlimit_exact_replayed_total", Counter, "{charge}",
		"Charges the replays applied to the store."),
		func(s *shardsync.ExactStats) float64 { return float64(s.Replayed) }},
	{family("shardlimit_exact_replay_rejected_total", Counter, "{charge}",
		"Charges the store refused (a key holding foreign or corrupt state)."),
		func(s *shardsync.ExactStats) float64 { return float64(s.ReplayRejected) }},
	{family("shardlimit_exact_units_lost_total", Counter, "{unit}",
		"Units of this process that replies showed the store had lost (a reply counted fewer units of a key than this process had in the store); the journal sends them again."),
		func(s *shardsync.ExactStats) float64 { return float64(s.LostUnits) }},
	{family("shardlimit_exact_losses_total", Counter, "{reply}",
		"Replies that proved the store lost a key's state: such a loss, or the state born again before it could expire (whoever had units in it); each turns the limiter Degraded with ErrEvicting for two EvictionChecks."),
		func(s *shardsync.ExactStats) float64 { return float64(s.Losses) }},
	{family("shardlimit_exact_deny_cache_hits_total", Counter, "{decision}",
		"Decisions the deny cache answered with no call to the store: one unit of a key the store had denied, before the instant the denial named."),
		func(s *shardsync.ExactStats) float64 { return float64(s.DenyCacheHits) }},
	{storeBadReplies, func(s *shardsync.ExactStats) float64 { return float64(s.BadReplies) }},
	{storeEvicting, func(s *shardsync.ExactStats) float64 { return boolGauge(s.Eviction.Evicting) }},
	{storeEvicted, func(s *shardsync.ExactStats) float64 { return float64(s.Eviction.Evicted) }},
	{storePolicyShare, func(s *shardsync.ExactStats) float64 { return s.PolicyShare }},
}

// Families returns every family Collect may report, in the order WriteText
// writes them. The result is fresh; the families it points to are shared
// and must not be changed.
func Families() []*Family {
	out := []*Family{limiterInfo, limit, window, decisions, errorsTotal, settledUnits, settleProblems, keys, keysEvicted, keysRefused, groupRules}
	seen := map[*Family]bool{}
	for _, f := range out {
		seen[f] = true
	}
	for _, r := range sharedRows {
		if !seen[r.f] {
			seen[r.f] = true
			out = append(out, r.f)
		}
	}
	for _, r := range exactRows {
		if !seen[r.f] {
			seen[r.f] = true
			out = append(out, r.f)
		}
	}
	return out
}
