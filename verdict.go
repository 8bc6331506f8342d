package shardlimit

import "time"

// verdict is an algorithm's decision packed in three words. Unlike a Result
// (56 bytes, which the compiler keeps in memory and copies in 16-byte moves
// that stall on a struct just written field by field), it stays in
// registers from the algorithm to the exported method that builds the
// Result.
type verdict struct {
	word  uint64 // verdictAllowed, verdictFull, limit << 2, remaining << 33
	reset time.Duration
	retry time.Duration
}

const (
	verdictAllowed = 1 << 0 // the cost was admitted
	verdictFull    = 1 << 1 // no memory to store the admission: ErrTooManyKeys
	verdictMask31  = 1<<31 - 1
)

// makeVerdict packs a decision; limit and remaining are at most MaxLimit.
func makeVerdict(allowed bool, limit uint32, remaining int, reset, retry time.Duration) verdict {
	w := uint64(limit)<<2 | uint64(remaining)<<33
	if allowed {
		w |= verdictAllowed
	}
	return verdict{word: w, reset: reset, retry: retry}
}

func (v verdict) allowed() bool { return v.word&verdictAllowed != 0 }

func (v verdict) limit() int     { return int(v.word >> 2 & verdictMask31) }
func (v verdict) remaining() int { return int(v.word >> 33) }

func (v verdict) err() error {
	if v.word&verdictFull != 0 {
		return ErrTooManyKeys
	}
	return nil
}

// result unpacks v.
func (v verdict) result() Result {
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}
