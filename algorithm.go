package shardlimit

// algorithm is what each of the four algorithms supplies to the limiter
// they share: its per-key record type E and the operations on it. Every
// method requires the shard's mutex held. Instants are Unix nanoseconds on
// the limiter's timeline.
//
// The time rule lives here: per key, time never goes back. decide and idle
// work at max(t, the key's latest instant), so a request whose instant was
// read before another's (concurrent callers, request times read early, a
// stalled goroutine, a wall clock set back) is decided at the key's latest
// instant, and no pattern of instants can admit more than a sequence raised
// to its running maximum would. Durations in the verdict are measured from
// the caller's own t, so t+RetryAfter is the first instant at which the same
// request fits.
type algorithm[E any] interface {
	// init makes rec the state of a fresh key whose latest instant is t,
	// with lim word w (see ownLimit).
	init(rec *E, t int64, w uint32)
	// decide applies cost n >= 0 at t to rec, whose side words are side.
	// The limiter passes side nil for a stored key of an algorithm whose
	// records name a slab entry (slabUser): decide finds it then. Without
	// mode&consume, decide is a peek on a copy of the key's state (the
	// limiter's scratch record and side words), which it may change.
	// Without mode&full, only the verdict's allowed bit is computed:
	// Remaining, ResetAfter and RetryAfter may be left 0.
	decide(s *shard[E], rec *E, side []uint32, t int64, n int, mode decideMode) verdict
	// idle reports whether rec's state at max(t, its latest instant)
	// equals a fresh key's. A key with a limit of its own is never idle.
	idle(s *shard[E], rec *E, side []uint32, t int64) bool
	// limitWord returns rec's lim word.
	limitWord(rec *E) *uint32
	// lastSeen returns rec's latest instant.
	lastSeen(rec *E) int64
}

// decideMode says what a decision computes and keeps.
type decideMode uint8

const (
	// consume keeps the decision: an admitted cost is consumed and the
	// key's state moves to the instant decided at. Without it the call is
	// a peek.
	consume decideMode = 1 << iota
	// full computes the Result's numbers, not only whether the cost is
	// admitted: the bool-returning methods need no more, and the durations
	// cost divisions and scans.
	full
)

// relimiter is implemented by algorithms whose state is encoded for the
// limit it was last decided under (GCRA's fraction of a nanosecond, the
// sliding log's ring capacity).
type relimiter[E any] interface {
	// relimit re-encodes rec's state, encoded for limit old (0: no usage
	// recorded), for limit lim > 0, keeping its usage.
	relimit(s *shard[E], rec *E, old, lim uint32)
}

// slabUser is implemented by algorithms whose side words are an entry of
// the shard's slab that their record names, so a record that moves leaves
// its side words in place.
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
