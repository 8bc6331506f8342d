package core

import "time"

// verdict is an algorithm's decision packed in three words. Unlike a Result
// (64 bytes, which the compiler keeps in memory and copies in 16-byte moves
// that stall on a struct just written field by field), it stays in
// registers from the algorithm to the exported method that builds the
// Result.
type verdict struct {
	word  uint64 // verdictAllowed, verdictFull, the rate, limit and remaining
	reset time.Duration
	retry time.Duration
}

// The bits of verdict.word. Limits and remaining are at most MaxLimit, 30
// bits; the rate is an index into the limiter's rates, below MaxRates.
const (
	verdictAllowed    = 1 << 0 // the cost was admitted
	verdictFull       = 1 << 1 // no memory to store the admission: ErrTooManyKeys
	verdictRateShift  = 2      // 2 bits: the binding rate
	verdictLimitShift = 4      // 30 bits
	verdictRemShift   = 34     // 30 bits
	verdictMask30     = 1<<30 - 1
)

// makeVerdict packs a decision by rate k.
func makeVerdict(allowed bool, k int, limit uint32, remaining int, reset, retry time.Duration) verdict {
	w := uint64(k)<<verdictRateShift | uint64(limit)<<verdictLimitShift | uint64(remaining)<<verdictRemShift
	if allowed {
		w |= verdictAllowed
	}
	return verdict{word: w, reset: reset, retry: retry}
}

func (v verdict) allowed() bool { return v.word&verdictAllowed != 0 }

func (v verdict) rate() int      { return int(v.word >> verdictRateShift & (MaxRates - 1)) }
func (v verdict) limit() int     { return int(v.word >> verdictLimitShift & verdictMask30) }
func (v verdict) remaining() int { return int(v.word >> verdictRemShift & verdictMask30) }

func (v verdict) err() error {
	if v.word&verdictFull != 0 {
		return ErrTooManyKeys
	}
	return nil
}

// bind returns, of b (the binding verdict of rates k+1 and up, ignored
// when k is the last rate) and v (rate k's), the one a Result reports
// when a key has several rates: the least remaining after the decision,
// ties to the longest window (the rates are kept longest first and bound
// from the last, so the lower index); its RetryAfter is the latest of
// the two. Each rate's usage only falls as time passes, so the first
// instant at which every rate admits a request is the latest of their
// RetryAfters.
func bind(b, v verdict, k, rates int) verdict {
	if k == rates-1 {
		return v
	}
	retry := max(b.retry, v.retry)
	if v.remaining() <= b.remaining() {
		b = v
	}
	b.retry = retry
	return b
}

// The verdict's fields for package shardlimit's generated methods, which
// build their Result from them in place (a Result built here and converted
// there is copied once more, through memory: a quarter of a decision).

// Allowed is Result.Allowed.
func (v verdict) Allowed() bool { return v.allowed() }

// Limit is Result.Limit.
func (v verdict) Limit() int { return v.limit() }

// Remaining is Result.Remaining.
func (v verdict) Remaining() int { return v.remaining() }

// ResetAfter is Result.ResetAfter.
func (v verdict) ResetAfter() time.Duration { return v.reset }

// RetryAfter is Result.RetryAfter.
func (v verdict) RetryAfter() time.Duration { return v.retry }

// Err is Result.Err.
func (v verdict) Err() error { return v.err() }
