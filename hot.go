package shardlimit

import (
	"time"

	"github.com/cespare/xxhash/v2"
)

// The four limiters: the shared limiter bound to each record type. Their
// hot methods are written out per type so that a call through the Limiter
// interface reaches decideKey directly, without the extra copy of
// arguments and Result that a method of a generic type costs.

type fixedLimiter struct{ limiter[fixedRec] }
type logLimiter struct{ limiter[logRec] }
type counterLimiter struct{ limiter[counterRec] }
type gcraLimiter struct{ limiter[gcraRec] }

func (l *fixedLimiter) Allow(key string) bool {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), l.now(), 1, true).Allowed
}

func (l *fixedLimiter) AllowN(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), unixNanos(now), n, true)
}

func (l *fixedLimiter) AllowBytes(key []byte) bool {
	return decideKey(&l.limiter, key, xxhash.Sum64(key), l.now(), 1, true).Allowed
}

func (l *fixedLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64(key), unixNanos(now), n, true)
}

func (l *fixedLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), unixNanos(now), n, false)
}

func (l *logLimiter) Allow(key string) bool {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), l.now(), 1, true).Allowed
}

func (l *logLimiter) AllowN(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), unixNanos(now), n, true)
}

func (l *logLimiter) AllowBytes(key []byte) bool {
	return decideKey(&l.limiter, key, xxhash.Sum64(key), l.now(), 1, true).Allowed
}

func (l *logLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64(key), unixNanos(now), n, true)
}

func (l *logLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), unixNanos(now), n, false)
}

func (l *counterLimiter) Allow(key string) bool {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), l.now(), 1, true).Allowed
}

func (l *counterLimiter) AllowN(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), unixNanos(now), n, true)
}

func (l *counterLimiter) AllowBytes(key []byte) bool {
	return decideKey(&l.limiter, key, xxhash.Sum64(key), l.now(), 1, true).Allowed
}

func (l *counterLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64(key), unixNanos(now), n, true)
}

func (l *counterLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), unixNanos(now), n, false)
}

func (l *gcraLimiter) Allow(key string) bool {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), l.now(), 1, true).Allowed
}

func (l *gcraLimiter) AllowN(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), unixNanos(now), n, true)
}

func (l *gcraLimiter) AllowBytes(key []byte) bool {
	return decideKey(&l.limiter, key, xxhash.Sum64(key), l.now(), 1, true).Allowed
}

func (l *gcraLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64(key), unixNanos(now), n, true)
}

func (l *gcraLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, xxhash.Sum64String(key), unixNanos(now), n, false)
}
