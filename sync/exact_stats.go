package sync

import "github.com/shardlimit/shardlimit"

// ExactStats are an Exact limiter's cumulative counters since construction.
type ExactStats struct {
	State           State  // state now
	Calls           uint64 // decision scripts sent to Redis
	Errors          uint64 // of which failed (any error, including timeouts)
	Timeouts        uint64 // of which timed out
	BadReplies      uint64 // of which the store's reply was unreadable (ErrBadReply)
	PolicyDecisions uint64 // decisions made by the FailurePolicy
	Trips           uint64 // changes Healthy -> Degraded
	Recoveries      uint64 // changes Degraded -> Healthy
	Probes          uint64 // reconnect probes sent
	ProbeFailures   uint64 // of which failed

	// PolicyShare is the share of the decisions of the last whole
	// HealthInterval that the FailurePolicy made (a call failed, timed
	// out or got an unreadable reply, or the limiter was Degraded), in
	// [0, 1], out of RecentDecisions. Above DegradePercent of at least
	// MinHealthCount decisions the limiter is Degraded (see State).
	PolicyShare     float64
	RecentDecisions uint64

	// LastError is the most recent failure of a call to Redis, nil if
	// there was none. It wraps ErrUnavailable, ErrRejected or ErrBadReply
	// and the error that caused it. Failures that do not degrade the
	// limiter (a reply that cannot be read, an error reply) are reported
	// here and in Errors and BadReplies: the call is decided by the
	// FailurePolicy.
	LastError error

	// Eviction is what the limiter knows of Redis's key eviction.
	Eviction Eviction

	// The journal (see the package doc on outages): the keys it holds
	// now; the grants it could not record because it was full of keys
	// whose units still count (see ExactConfig.JournalKeys); replays sent
	// to the store, of which failed (their units are sent again at the
	// next); charges the replays applied; and charges the store refused
	// (a key holding foreign or corrupt state), whose units were dropped.
	JournalKeys    int
	JournalFull    uint64
	Replays        uint64
	ReplayFailures uint64
	Replayed       uint64
	ReplayRejected uint64

	// LostUnits are the units of this process that replies showed the
	// store had lost (evicted or restarted empty, before INFO showed it):
	// a reply counted fewer units of a key than this process's journal
	// proved the store held when the call was sent (the most by which one
	// rate fell short). Losses counts the replies that proved a loss:
	// those, and those that showed a key's state born again before it
	// could expire, whoever had units in it (see the package doc on
	// eviction). Each makes the limiter Degraded with ErrEvicting and
	// decides by the policy until every unit of the journal is in the
	// store again. A Reset (by any process) is not a loss.
	LostUnits uint64
	Losses    uint64

	// DenyCacheHits counts the decisions the deny cache answered: denials
	// of keys the store had denied until an instant not yet reached, made
	// in-process with no call to the store (see Exact). They are counted
	// in Stats' Denied, not in Calls nor in RecentDecisions.
	DenyCacheHits uint64
}

// Stats returns the counts of decisions of positive cost this limiter made
// (by Redis or by the policy); Keys, Evicted and Refused are the fallback's.
func (e *Exact) Stats() shardlimit.Stats {
	st := shardlimit.Stats{Allowed: e.allowed.Load(), Denied: e.denied.Load()}
	if e.fallback != nil {
		fs := e.fallback.Stats()
		st.Keys, st.Evicted, st.Refused = fs.Keys, fs.Evicted, fs.Refused
	}
	return st
}

// ExactStats returns the counters of the Redis path and the failure
// policy.
func (e *Exact) ExactStats() ExactStats {
	share, recent := e.share.last()
	return ExactStats{
		PolicyShare:     share,
		RecentDecisions: recent,
		State:           State(e.state.Load()),
		Calls:           e.calls.Load(),
		Errors:          e.errs.Load(),
		Timeouts:        e.timeouts.Load(),
		BadReplies:      e.badReplies.Load(),
		PolicyDecisions: e.policyDecs.Load(),
		Trips:           e.trips.Load(),
		Recoveries:      e.recoveries.Load(),
		Probes:          e.probes.Load(),
		ProbeFailures:   e.probeFails.Load(),
		LastError:       e.lastErr.get(),
		Eviction:        e.hub.eviction(e.evictEvery),
		JournalKeys:     e.journal.keys(),
		JournalFull:     e.journal.full.Load(),
		Replays:         e.replays.Load(),
		ReplayFailures:  e.replayFails.Load(),
		Replayed:        e.replayed.Load(),
		ReplayRejected:  e.replayRejected.Load(),
		LostUnits:       e.lostUnits.Load(),
		Losses:          e.losses.Load(),
		DenyCacheHits:   e.deny.hits.Load(),
	}
}
