package sync

import (
	"time"

	"github.com/shardlimit/shardlimit"
)

// SharedStats are a Shared limiter's counters since construction. With
// several rates (Config.Rates) every admitted unit counts in each rate's
// counters, so the unit counts (SentUnits, RetriedUnits, UnknownUnits,
// DroppedUnits) count it once per rate: for each rate, every unit admitted
// is sent, retried until sent, unknown or dropped.
type SharedStats struct {
	State         State         // state now
	Flushes       uint64        // flushes that sent at least one item
	FailedFlushes uint64        // of which nothing was applied
	Items         uint64        // items sent (one per key, rate and bucket)
	ItemErrors    uint64        // items not applied
	BadReplies    uint64        // of which the store's reply was unreadable (ErrBadReply)
	LastKeys      int           // keys in the last flush
	NearKeys      int           // of which read because near their limit (see Shared), decided or not
	LastLatency   time.Duration // duration of the last flush
	MaxLatency    time.Duration // longest flush
	MaxFlushGap   time.Duration // longest time between the starts of two flushes while Healthy: FlushInterval plus the flush between and any lateness of the goroutine's timer
	SentUnits     uint64        // units sent and applied
	RetriedUnits  uint64        // units that provably did not reach the store, sent again later
	UnknownUnits  uint64        // units whose reply was lost, or whose last attempt could not dial on a client that re-sends (MaybeApplied; healed by the next flush's floor)
	DroppedUnits  uint64        // units whose bucket ended before they could be sent, or that the final flush of Close or Shutdown provably did not send
	LostUnits     uint64        // other nodes' units this node had read in a live window or bucket and the store later answered without (it lost them: evicted the counter, restarted empty, failed over); this node keeps counting them, and the limiter is Degraded with ErrEvicting for an EvictionCheck after each such read
	Losses        uint64        // flush items that found such a loss
	Trips         uint64        // changes Healthy -> Degraded
	Recoveries    uint64        // changes Degraded -> Healthy
	ClockOffset   time.Duration // store clock minus local clock, last measured
	Pending       int           // keys waiting for the next flush

	// PolicyShare is the share of the store items of the last whole
	// HealthInterval that were not applied (their keys' decisions went
	// on without the store's counts), in [0, 1], out of RecentItems.
	// Above DegradePercent of at least MinHealthCount items the limiter
	// is Degraded (see State).
	PolicyShare float64
	RecentItems uint64

	// LastError is the most recent failure of an item, a flush or a probe
	// of the store, nil if there was none. It wraps ErrUnavailable,
	// ErrRejected or ErrBadReply and the error that caused it.
	LastError error

	// Eviction is what the reconciler knows of the store's key eviction.
	Eviction Eviction
}

// Len returns the number of keys stored in this process.
func (s *Shared) Len() int { return s.core.Len() }

// Stats returns the local limiter's counters.
func (s *Shared) Stats() shardlimit.Stats { return shardlimit.Stats(s.core.Stats()) }

// SharedStats returns the reconciler's counters.
func (s *Shared) SharedStats() SharedStats {
	dropped, pending := s.tab.SyncStats()
	share, recent := s.share.last()
	return SharedStats{
		PolicyShare:   share,
		RecentItems:   recent,
		State:         State(s.state.Load()),
		Flushes:       s.flushCount.Load(),
		FailedFlushes: s.failedFlushes.Load(),
		Items:         s.itemCount.Load(),
		ItemErrors:    s.itemErrs.Load(),
		BadReplies:    s.badReplies.Load(),
		LastKeys:      int(s.lastKeys.Load()),
		NearKeys:      int(s.lastNear.Load()),
		LastLatency:   time.Duration(s.lastLatency.Load()),
		MaxLatency:    time.Duration(s.maxLatency.Load()),
		MaxFlushGap:   time.Duration(s.maxGap.Load()),
		SentUnits:     s.sentUnits.Load(),
		RetriedUnits:  s.retried.Load(),
		UnknownUnits:  s.unknown.Load(),
		DroppedUnits:  s.dropped.Load() + dropped,
		LostUnits:     s.lostUnits.Load(),
		Losses:        s.losses.Load(),
		Trips:         s.trips.Load(),
		Recoveries:    s.recoveries.Load(),
		ClockOffset:   time.Duration(s.hub.offset.Load()),
		Pending:       pending,
		LastError:     s.lastErr.get(),
		Eviction:      s.hub.eviction(s.evictEvery),
	}
}
