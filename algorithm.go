package shardlimit

// algorithm is what each of the four algorithms supplies to the limiter
// they share: its per-key record type E and the operations on it. Every
// method requires the shard's mutex held. Instants are Unix nanoseconds on
// the limiter's timeline.
//
// The time rule lives here: per key, time never goes back. decide works at
// max(t, the key's latest instant), so a request whose instant was
// read before another's (concurrent callers, request times read early, a
// stalled goroutine, a wall clock set back) is decided at the key's latest
// instant, and no pattern of instants can admit more than a sequence raised
// to its running maximum would. Durations in the verdict are measured from
// the caller's own t, so t+RetryAfter is the first instant at which the same
// request fits.
type algorithm[E any] interface {
	// init makes the key in slot (record rec) fresh: no usage, t its
	// latest instant. It keeps the key's lim words.
	init(s *shard[E], rec *E, slot uint32, t int64)
	// decide applies cost n >= 0 at t to the key in slot, whose record is
	// rec. With several rates, the key's rates after the first keep their
	// state in extra records of type E (shard.keyState). Without
	// mode&consume, decide is a peek: slot is scratchSlot and rec the
	// shard's scratch copy of the key, which it may change. Without
	// mode&full, only the verdict's allowed bit is computed: Remaining,
	// ResetAfter and RetryAfter may be left 0.
	decide(s *shard[E], rec *E, slot uint32, t int64, n int, mode decideMode) verdict
	// idle reports whether the state of the key in slot (record rec) at
	// t, which is not before the key's latest instant (table.idleAt checks
	// that), equals a fresh key's. A key with a limit of its own is never
	// idle.
	idle(s *shard[E], rec *E, slot uint32, t int64) bool
	// limitWord returns the lim word of a record: the key's first rate's
	// in its record, a later rate's in its extra record.
	limitWord(rec *E) *uint32
	// lastSeen returns the latest instant of the key whose record is rec.
	lastSeen(rec *E) int64
}

// decideMode says what a decision computes and keeps, and for which rate.
type decideMode uint8

const (
	// consume keeps the decision: an admitted cost is consumed. Without it
	// the call is a peek, or the first pass of decideRates.
	consume decideMode = 1 << iota
	// full computes the Result's numbers, not only whether the cost is
	// admitted: the bool-returning methods need no more, and the durations
	// cost divisions and scans.
	full
	// lagging marks an instant read from a clock whose readings lag
	// (laggingClock, as CoarseClock): the true instant lies after it, so
	// the sliding log stamps the units it admits at the true instant,
	// which it reads then.
	lagging
	rateShift = iota // the rate index in bits 3-4
)

// rate returns the index of the rate mode decides.
func (m decideMode) rate() int { return int(m >> rateShift & (MaxRates - 1)) }

// withRate returns m deciding rate k.
func (m decideMode) withRate(k int) decideMode {
	return m&^((MaxRates-1)<<rateShift) | decideMode(k)<<rateShift
}

// decideRates decides n units at t for a key of several rates, whose
// record r holds the first rate and extra records the others, with one
// decide per rate and pass: first every rate decides without
// keeping anything (its state brought to the instant decided at), then, if
// all admit, every rate decides again keeping the cost, the first rate
// last (the sliding log's ring lives there, and the others count the units
// it adds before it adds them); if one denies, the rates that admitted
// report their numbers without the cost. The Result reports the binding
// rate.
func decideRates[E any](a algorithm[E], s *shard[E], r *E, extra []E, slot uint32, t int64, n int, mode decideMode) verdict {
	rates := len(extra) + 1
	rec := func(k int) *E {
		if k == 0 {
			return r
		}
		return &extra[k-1]
	}
	var fits uint8 // bit k: rate k admits the request
	for k := range rates {
		// Every rate decides, even after one denied: a decision brings
		// each rate's state to its instant and limit (GCRA re-encodes its
		// debt for a changed limit), so a bool form leaves the state a
		// Result form does.
		if a.decide(s, rec(k), slot, t, n, (mode &^ consume).withRate(k)).allowed() {
			fits |= 1 << k
		}
	}
	allowed := fits == 1<<rates-1
	if !allowed && mode&full == 0 {
		return verdict{}
	}
	var b binding
	for k := rates - 1; k >= 0; k-- {
		m, nk := mode, n
		if !allowed {
			m &^= consume
			if fits&(1<<k) != 0 {
				nk = 0 // this rate admits: its numbers without the cost
			}
		}
		v := a.decide(s, rec(k), slot, t, nk, m.withRate(k))
		if v.word&verdictFull != 0 {
			return v
		}
		b = b.bind(k, uint32(v.limit()), int64(v.remaining()), v.reset, v.retry)
	}
	if mode&full == 0 {
		return verdict{word: verdictAllowed}
	}
	return b.verdict(allowed)
}

// fits reports whether n more units fit limit lim over used ones: n = 0
// always does.
func fits(n int, lim uint32, used int64) bool {
	return n == 0 || int64(n) <= int64(lim) && used+int64(n) <= int64(lim)
}

// b2u is verdictAllowed if ok, else 0.
func b2u(ok bool) uint64 {
	if ok {
		return verdictAllowed
	}
	return 0
}

// relimiter is implemented by algorithms whose state is encoded for the
// limit it was last decided under (GCRA's fraction of a nanosecond, the
// sliding log's ring capacity).
type relimiter[E any] interface {
	// relimit re-encodes the state of rate k of the key in slot (record
	// rec), encoded for limit old (0: no usage recorded), for limit lim > 0,
	// keeping its usage.
	relimit(s *shard[E], rec *E, slot uint32, k int, old, lim uint32)
}

// slabUser is implemented by algorithms whose side words and extra records
// are an entry of the shard's slab that their record names, so a record
// that moves leaves them in place (when the algorithm keeps any).
type slabUser[E any] interface {
	// sideRef returns the field of rec that names its slab entry. init
	// keeps the field as it is.
	sideRef(rec *E) *uint32
}

// storageOwner is implemented by algorithms that keep per-key storage
// outside the records (the sliding log's rings).
type storageOwner[E any] interface {
	// release frees the storage rec owns.
	release(s *shard[E], rec *E)
	// compact tidies the shard's storage after a sweep.
	compact(s *shard[E])
}
