package shardlimit

import (
	"time"

	"github.com/cespare/xxhash/v2"
)

// The four limiters: the shared limiter bound to each record type and
// algorithm. Their hot methods are written out per type and per key form,
// the same ten lines sixteen times: a decision on a stored key calls the
// algorithm's decideTo directly, with the Result on the method's own stack,
// instead of through the algorithm interface or one more (generic) call,
// which measured 24% slower on a hot key (44 vs 34 ns/op). Everything else
// (new keys, peeks, errors) goes through decideKey. Keep the bodies alike.

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

func (l *fixedLimiter) Allow(key string) bool {
	h, t := mix(xxhash.Sum64String(key), l.tab.seed), l.now()
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	var r Result
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, 1, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r.Allowed
}

func (l *fixedLimiter) AllowN(key string, now time.Time, n int) (r Result) {
	h, t := mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now)
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

func (l *fixedLimiter) AllowBytes(key []byte) bool {
	h, t := mix(xxhash.Sum64(key), l.tab.seed), l.now()
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	var r Result
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, 1, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r.Allowed
}

func (l *fixedLimiter) AllowBytesN(key []byte, now time.Time, n int) (r Result) {
	h, t := mix(xxhash.Sum64(key), l.tab.seed), unixNanos(now)
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

func (l *fixedLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n, false)
}

func (l *logLimiter) Allow(key string) bool {
	h, t := mix(xxhash.Sum64String(key), l.tab.seed), l.now()
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	var r Result
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, 1, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r.Allowed
}

func (l *logLimiter) AllowN(key string, now time.Time, n int) (r Result) {
	h, t := mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now)
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

func (l *logLimiter) AllowBytes(key []byte) bool {
	h, t := mix(xxhash.Sum64(key), l.tab.seed), l.now()
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	var r Result
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, 1, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r.Allowed
}

func (l *logLimiter) AllowBytesN(key []byte, now time.Time, n int) (r Result) {
	h, t := mix(xxhash.Sum64(key), l.tab.seed), unixNanos(now)
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

func (l *logLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n, false)
}

func (l *counterLimiter) Allow(key string) bool {
	h, t := mix(xxhash.Sum64String(key), l.tab.seed), l.now()
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	var r Result
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, 1, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r.Allowed
}

func (l *counterLimiter) AllowN(key string, now time.Time, n int) (r Result) {
	h, t := mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now)
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

func (l *counterLimiter) AllowBytes(key []byte) bool {
	h, t := mix(xxhash.Sum64(key), l.tab.seed), l.now()
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	var r Result
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, 1, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r.Allowed
}

func (l *counterLimiter) AllowBytesN(key []byte, now time.Time, n int) (r Result) {
	h, t := mix(xxhash.Sum64(key), l.tab.seed), unixNanos(now)
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

func (l *counterLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n, false)
}

func (l *gcraLimiter) Allow(key string) bool {
	h, t := mix(xxhash.Sum64String(key), l.tab.seed), l.now()
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	var r Result
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, 1, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r.Allowed
}

func (l *gcraLimiter) AllowN(key string, now time.Time, n int) (r Result) {
	h, t := mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now)
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

func (l *gcraLimiter) AllowBytes(key []byte) bool {
	h, t := mix(xxhash.Sum64(key), l.tab.seed), l.now()
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	var r Result
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	l.alg.decideTo(&r, s, rec, l.tab.sideOf(s, slot), t, 1, true)
	unlockStored(&l.limiter, s, slot, r.Allowed)
	return r.Allowed
}

func (l *gcraLimiter) AllowBytesN(key []byte, now time.Time, n int) (r Result) {
	h, t := mix(xxhash.Sum64(key), l.tab.seed), unixNanos(now)
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

func (l *gcraLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, mix(xxhash.Sum64String(key), l.tab.seed), unixNanos(now), n, false)
}
