package shardlimit

import (
	"time"

	"github.com/cespare/xxhash/v2"
)

// The four limiters: the shared limiter bound to each record type and
// algorithm. Their hot methods are written out per type: a decision on a
// stored key calls the algorithm's decideTo directly, with the Result on the
// caller's stack, instead of through the algorithm interface; everything
// else (new keys, peeks, errors) goes through decideKey.

type fixedLimiter struct {
	limiter[fixedRec]
	alg *fixedWindow
}

type logLimiter struct {
	limiter[logRec]
	alg *slidingLog
}

type counterLimiter struct {
	limiter[counterRec]
	alg *slidingCounter
}

type gcraLimiter struct {
	limiter[gcraRec]
	alg *gcra
}

// lockStored validates a consuming call of cost n > 0 at t and, if key is
// stored, returns its shard, locked, and its slot.
func lockStored[E any, K keyBytes](l *limiter[E], key K, h uint64, t int64, n int) (*shard[E], uint32, bool) {
	if n <= 0 || t < 0 || len(key) == 0 || len(key) > l.tab.maxKeyBytes || l.closed.Load() {
		return nil, 0, false
	}
	s := l.tab.shardFor(h)
	s.mu.Lock()
	if slot, ok := find(s, h, key); ok {
		return s, slot, true
	}
	s.mu.Unlock()
	return nil, 0, false
}

// unlockStored finishes a decision on a stored key: counts it, queues the
// key for the reconciler if shared, and unlocks the shard.
func unlockStored[E any](l *limiter[E], s *shard[E], slot uint32, allowed bool) {
	if allowed {
		s.allowed++
	} else {
		s.denied++
	}
	if y := l.tab.sync; y != nil {
		markTouched(s, y, slot, l.tab.sideOf(s, slot))
	}
	s.mu.Unlock()
}

func fixedAllow[K keyBytes](l *fixedLimiter, key K, h uint64, t int64, n int) (r Result) {
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, n, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r
}

func logAllow[K keyBytes](l *logLimiter, key K, h uint64, t int64, n int) (r Result) {
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, n, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r
}

func counterAllow[K keyBytes](l *counterLimiter, key K, h uint64, t int64, n int) (r Result) {
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, n, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r
}

func gcraAllow[K keyBytes](l *gcraLimiter, key K, h uint64, t int64, n int) (r Result) {
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, n, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r
}

func (l *fixedLimiter) Allow(key string) bool {
	return fixedAllow(l, key, mix(xxhash.Sum64String(key), l.tab.seed), l.now(), 1).Allowed
}

func (l *fixedLimiter) AllowN(key string, now time.Time, n int) Result {
	return fixedAllow(l, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n)
}

func (l *fixedLimiter) AllowBytes(key []byte) bool {
	return fixedAllow(l, key, mix(xxhash.Sum64(key), l.tab.seed), l.now(), 1).Allowed
}

func (l *fixedLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	return fixedAllow(l, key, mix(xxhash.Sum64(key), l.tab.seed), unixNanos(now), n)
}

func (l *fixedLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n, false)
}

func (l *logLimiter) Allow(key string) bool {
	return logAllow(l, key, mix(xxhash.Sum64String(key), l.tab.seed), l.now(), 1).Allowed
}

func (l *logLimiter) AllowN(key string, now time.Time, n int) Result {
	return logAllow(l, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n)
}

func (l *logLimiter) AllowBytes(key []byte) bool {
	return logAllow(l, key, mix(xxhash.Sum64(key), l.tab.seed), l.now(), 1).Allowed
}

func (l *logLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	return logAllow(l, key, mix(xxhash.Sum64(key), l.tab.seed), unixNanos(now), n)
}

func (l *logLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n, false)
}

func (l *counterLimiter) Allow(key string) bool {
	return counterAllow(l, key, mix(xxhash.Sum64String(key), l.tab.seed), l.now(), 1).Allowed
}

func (l *counterLimiter) AllowN(key string, now time.Time, n int) Result {
	return counterAllow(l, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n)
}

func (l *counterLimiter) AllowBytes(key []byte) bool {
	return counterAllow(l, key, mix(xxhash.Sum64(key), l.tab.seed), l.now(), 1).Allowed
}

func (l *counterLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	return counterAllow(l, key, mix(xxhash.Sum64(key), l.tab.seed), unixNanos(now), n)
}

func (l *counterLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n, false)
}

func (l *gcraLimiter) Allow(key string) bool {
	return gcraAllow(l, key, mix(xxhash.Sum64String(key), l.tab.seed), l.now(), 1).Allowed
}

func (l *gcraLimiter) AllowN(key string, now time.Time, n int) Result {
	return gcraAllow(l, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n)
}

func (l *gcraLimiter) AllowBytes(key []byte) bool {
	return gcraAllow(l, key, mix(xxhash.Sum64(key), l.tab.seed), l.now(), 1).Allowed
}

func (l *gcraLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	return gcraAllow(l, key, mix(xxhash.Sum64(key), l.tab.seed), unixNanos(now), n)
}

func (l *gcraLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n, false)
}
