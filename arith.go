package shardlimit

import (
	"math/bits"
	"time"
)

// mulDiv returns a*b/c and a*b%c computed in 128 bits, so a product of a
// limit, a cost and a window in nanoseconds cannot overflow. It requires
// a*b < c<<64 (the quotient fits in 64 bits); callers guarantee it.
func mulDiv(a, b, c uint64) (q, r uint64) {
	hi, lo := bits.Mul64(a, b)
	return bits.Div64(hi, lo, c)
}

// mulDivCeil returns ceil(a*b/c) under the conditions of mulDiv.
func mulDivCeil(a, b, c uint64) uint64 {
	q, r := mulDiv(a, b, c)
	if r != 0 {
		q++
	}
	return q
}

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

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

// result unpacks v. The hot methods spell the literal out: a Result
// returned by an inlined call is copied once more.
func (v verdict) result() Result {
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}
