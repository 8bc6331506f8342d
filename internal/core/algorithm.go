package core

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
//
// A key shared with other nodes keeps their units, and this node's not yet
// sent, in a layer of its side words that the algorithms do not lay out:
// they ask the shard's peerLayer (s.peers, nil unless the limiter is
// shared) per rate, and count what it answers with their own units.
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
	// refund gives back the n > 0 units rate k of the key in slot (record
	// rec) kept in the decision just made, at the key's latest instant:
	// its state becomes what deciding without consume would have left. A
	// decision of several rates refunds the rates that kept a cost when
	// a later one denies it.
	refund(s *shard[E], rec *E, slot uint32, n int, k int)
	// settle charges (delta > 0) or refunds (delta < 0) |delta| <=
	// MaxLimit units of rate k of the key in slot (rate k's record r) for
	// a decision made at at (see limiter.settle for the rules): a charge
	// at the key's latest instant, never refused; a refund from the
	// window, bucket or stamps of at, never below zero and never of units
	// newer than the decision's own.
	settle(s *shard[E], r *E, slot uint32, at int64, delta int, k int)
	// reserve consumes n > 0 units of rate k of the key in slot (rate k's
	// record r) at instant t, which is not before the key's latest and
	// at which every rate admits them, without moving the key's latest
	// instant (see limiter.reserve), and reports false, consuming
	// nothing, if the shard has no memory for them. The key is not shared.
	reserve(s *shard[E], r *E, slot uint32, t int64, n int, k int) bool
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
	// latest returns the latest instant a settle of one of the key's
	// decisions could name, at least its latest instant: that of a
	// reservation held after it, or the end of the window or bucket one
	// lies in (the key in slot, record rec).
	latest(s *shard[E], rec *E, slot uint32) int64
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
	rateShift = iota // the rate index in bits 2-3
)

// rate returns the index of the rate mode decides.
func (m decideMode) rate() int { return int(m >> rateShift & (MaxRates - 1)) }

// withRate returns m deciding rate k.
func (m decideMode) withRate(k int) decideMode {
	return m&^((MaxRates-1)<<rateShift) | decideMode(k)<<rateShift
}

// rateCall is one decision of n units at t for a key of several rates in
// slot of shard s, whose record r holds the first rate and extra records
// the others.
type rateCall[E any] struct {
	s     *shard[E]
	r     *E
	extra []E
	slot  uint32
	t     int64
	n     int
	mode  decideMode
}

// rec returns the record of rate k.
func (c *rateCall[E]) rec(k int) *E {
	if k == 0 {
		return c.r
	}
	return &c.extra[k-1]
}

// decideRates decides c. Each rate decides once, keeping the cost, from
// the last rate to the first (the sliding log's ring lives in the first,
// and the others count the units it adds before it adds them): the common
// case, every rate admitting, costs one decide per rate. If rate k
// denies, the rates decided before it give their units back (refund) and
// those after it decide without keeping anything, so every rate's state
// is brought to the instant and limit decided at (GCRA re-encodes its
// debt for a changed limit) whatever the form; a Result then takes each
// rate's numbers once more, without the cost where the rate admits it.
// The Result reports the binding rate.
func decideRates[E any](a algorithm[E], c rateCall[E]) verdict {
	var b verdict // the binding rate's
	for k := len(c.extra); k >= 0; k-- {
		v := a.decide(c.s, c.rec(k), c.slot, c.t, c.n, c.mode.withRate(k))
		if v.word&(verdictAllowed|verdictFull) != verdictAllowed {
			return rateDenied(a, &c, k, v)
		}
		if c.mode&full != 0 {
			b = bind(b, v, k, len(c.extra)+1)
		}
	}
	if c.mode&full == 0 {
		return verdict{word: verdictAllowed}
	}
	return b
}

// rateDenied completes decideRates after rate k's verdict v denied the
// request, or found no memory for it (verdictFull, which it returns): the
// rates above k give back what they kept, the rates below it decide
// without keeping anything, and a Result takes every rate's numbers.
func rateDenied[E any](a algorithm[E], c *rateCall[E], k int, v verdict) verdict {
	rates, mode, n := len(c.extra)+1, c.mode, c.n
	if mode&consume != 0 && n > 0 {
		for j := k + 1; j < rates; j++ {
			a.refund(c.s, c.rec(j), c.slot, n, j)
		}
	}
	if v.word&verdictFull != 0 {
		return v
	}
	fits := uint8(1<<rates-1) &^ (1<<(k+1) - 1) // bit j: rate j admits the request
	for j := k - 1; j >= 0; j-- {
		if a.decide(c.s, c.rec(j), c.slot, c.t, n, (mode &^ (consume | full)).withRate(j)).allowed() {
			fits |= 1 << j
		}
	}
	if mode&full == 0 {
		return verdict{}
	}
	var b verdict
	for j := rates - 1; j >= 0; j-- {
		nj := n
		if fits&(1<<j) != 0 {
			nj = 0 // this rate admits: its numbers without the cost
		}
		b = bind(b, a.decide(c.s, c.rec(j), c.slot, c.t, nj, (mode&^consume).withRate(j)), j, rates)
	}
	b.word &^= verdictAllowed
	return b
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
