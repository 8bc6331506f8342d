package shardlimit

import "time"

// The four limiters: the shared limiter bound to each record type and
// algorithm. Their hot methods are written out per type and per key form,
// the same ten lines sixteen times: a decision on a stored key calls the
// algorithm's decide directly, its verdict in registers, instead of through
// the algorithm interface or one more (generic) call, which measured 24%
// slower on a hot key (44 vs 34 ns/op). AllowN spells the Result literal
// out: built by a helper, it is copied once more, in 16-byte moves that
// stall on a struct just written field by field. Allow and AllowAt share
// one body; the bool-returning methods spare the caller that copy too
// (the sliding counter's call its allow, which decides a busy key's common
// case without the call into decide: 12% faster; its AllowN and
// AllowBytesN call decideN, the same for the Result: 7%). Everything else (new
// keys, peeks, errors) goes through decideKey. Keep the bodies alike.

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
	// Most keys sit at their home position: check it before the probe loop.
	home := s.home(h)
	if r := &s.recs[home]; len(key) <= inlineKey && int(r.klen) == len(key) &&
		r.flags&^stepPending == tagOf(h) && string(r.key[:len(key)]) == string(key) {
		return s, home, true
	}
	if slot, ok := find(s, h, key); ok {
		return s, slot, true
	}
	s.mu.Unlock()
	return nil, 0, false
}

// unlockStored finishes a decision on the stored key in slot, whose side
// words are side: counts it, queues the key for the reconciler if shared,
// and unlocks the shard.
func unlockStored[E any](l *limiter[E], s *shard[E], slot uint32, side []uint32, allowed bool) {
	if allowed {
		s.allowed++
	} else {
		s.denied++
	}
	if y := l.tab.sync; y != nil {
		markTouched(s, y, slot, side)
	}
	s.mu.Unlock()
}

func (l *fixedLimiter) allowAt(key string, t int64) bool {
	h := l.tab.hash(key)
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideOf(s, slot)
	v := l.alg.decide(s, rec, side, t, 1, true, false)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return v.allowed()
}

func (l *fixedLimiter) Allow(key string) bool { return l.allowAt(key, l.now()) }

func (l *fixedLimiter) AllowAt(key string, now time.Time) bool {
	return l.allowAt(key, unixNanos(now))
}

func (l *fixedLimiter) AllowN(key string, now time.Time, n int) Result {
	h, t := l.tab.hash(key), unixNanos(now)
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideOf(s, slot)
	v := l.alg.decide(s, rec, side, t, n, true, true)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}

func (l *fixedLimiter) allowBytesAt(key []byte, t int64) bool {
	h := l.tab.hashBytes(key)
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideOf(s, slot)
	v := l.alg.decide(s, rec, side, t, 1, true, false)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return v.allowed()
}

func (l *fixedLimiter) AllowBytes(key []byte) bool { return l.allowBytesAt(key, l.now()) }

func (l *fixedLimiter) AllowBytesAt(key []byte, now time.Time) bool {
	return l.allowBytesAt(key, unixNanos(now))
}

func (l *fixedLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	h, t := l.tab.hashBytes(key), unixNanos(now)
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideOf(s, slot)
	v := l.alg.decide(s, rec, side, t, n, true, true)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}

func (l *fixedLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, l.tab.hash(key), unixNanos(now), n, false)
}

func (l *logLimiter) allowAt(key string, t int64) bool {
	h := l.tab.hash(key)
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideAt(s, rec.side)
	v := l.alg.decide(s, rec, side, t, 1, true, false)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return v.allowed()
}

func (l *logLimiter) Allow(key string) bool { return l.allowAt(key, l.now()) }

func (l *logLimiter) AllowAt(key string, now time.Time) bool {
	return l.allowAt(key, unixNanos(now))
}

func (l *logLimiter) AllowN(key string, now time.Time, n int) Result {
	h, t := l.tab.hash(key), unixNanos(now)
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideAt(s, rec.side)
	v := l.alg.decide(s, rec, side, t, n, true, true)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}

func (l *logLimiter) allowBytesAt(key []byte, t int64) bool {
	h := l.tab.hashBytes(key)
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideAt(s, rec.side)
	v := l.alg.decide(s, rec, side, t, 1, true, false)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return v.allowed()
}

func (l *logLimiter) AllowBytes(key []byte) bool { return l.allowBytesAt(key, l.now()) }

func (l *logLimiter) AllowBytesAt(key []byte, now time.Time) bool {
	return l.allowBytesAt(key, unixNanos(now))
}

func (l *logLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	h, t := l.tab.hashBytes(key), unixNanos(now)
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideAt(s, rec.side)
	v := l.alg.decide(s, rec, side, t, n, true, true)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}

func (l *logLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, l.tab.hash(key), unixNanos(now), n, false)
}

func (l *counterLimiter) allowAt(key string, t int64) bool {
	h := l.tab.hash(key)
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideAt(s, rec.side)
	allowed := l.alg.allow(s, rec, side, t, 1)
	unlockStored(&l.limiter, s, slot, side, allowed)
	return allowed
}

func (l *counterLimiter) Allow(key string) bool { return l.allowAt(key, l.now()) }

func (l *counterLimiter) AllowAt(key string, now time.Time) bool {
	return l.allowAt(key, unixNanos(now))
}

func (l *counterLimiter) AllowN(key string, now time.Time, n int) Result {
	h, t := l.tab.hash(key), unixNanos(now)
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideAt(s, rec.side)
	v := l.alg.decideN(s, rec, side, t, n)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}

func (l *counterLimiter) allowBytesAt(key []byte, t int64) bool {
	h := l.tab.hashBytes(key)
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideAt(s, rec.side)
	allowed := l.alg.allow(s, rec, side, t, 1)
	unlockStored(&l.limiter, s, slot, side, allowed)
	return allowed
}

func (l *counterLimiter) AllowBytes(key []byte) bool { return l.allowBytesAt(key, l.now()) }

func (l *counterLimiter) AllowBytesAt(key []byte, now time.Time) bool {
	return l.allowBytesAt(key, unixNanos(now))
}

func (l *counterLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	h, t := l.tab.hashBytes(key), unixNanos(now)
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideAt(s, rec.side)
	v := l.alg.decideN(s, rec, side, t, n)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}

func (l *counterLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, l.tab.hash(key), unixNanos(now), n, false)
}

func (l *gcraLimiter) allowAt(key string, t int64) bool {
	h := l.tab.hash(key)
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideOf(s, slot)
	v := l.alg.decide(s, rec, side, t, 1, true, false)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return v.allowed()
}

func (l *gcraLimiter) Allow(key string) bool { return l.allowAt(key, l.now()) }

func (l *gcraLimiter) AllowAt(key string, now time.Time) bool {
	return l.allowAt(key, unixNanos(now))
}

func (l *gcraLimiter) AllowN(key string, now time.Time, n int) Result {
	h, t := l.tab.hash(key), unixNanos(now)
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideOf(s, slot)
	v := l.alg.decide(s, rec, side, t, n, true, true)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}

func (l *gcraLimiter) allowBytesAt(key []byte, t int64) bool {
	h := l.tab.hashBytes(key)
	s, slot, ok := lockStored(&l.limiter, key, h, t, 1)
	if !ok {
		return decideKey(&l.limiter, key, h, t, 1, true).Allowed
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideOf(s, slot)
	v := l.alg.decide(s, rec, side, t, 1, true, false)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return v.allowed()
}

func (l *gcraLimiter) AllowBytes(key []byte) bool { return l.allowBytesAt(key, l.now()) }

func (l *gcraLimiter) AllowBytesAt(key []byte, now time.Time) bool {
	return l.allowBytesAt(key, unixNanos(now))
}

func (l *gcraLimiter) AllowBytesN(key []byte, now time.Time, n int) Result {
	h, t := l.tab.hashBytes(key), unixNanos(now)
	s, slot, ok := lockStored(&l.limiter, key, h, t, n)
	if !ok {
		return decideKey(&l.limiter, key, h, t, n, true)
	}
	rec := s.rec(slot)
	t = s.stepCheck(slot, l.alg.lastSeen(rec), t, true)
	side := l.tab.sideOf(s, slot)
	v := l.alg.decide(s, rec, side, t, n, true, true)
	unlockStored(&l.limiter, s, slot, side, v.allowed())
	return Result{Allowed: v.allowed(), Limit: v.limit(), Remaining: v.remaining(), ResetAfter: v.reset, RetryAfter: v.retry, Err: v.err()}
}

func (l *gcraLimiter) Peek(key string, now time.Time, n int) Result {
	return decideKey(&l.limiter, key, l.tab.hash(key), unixNanos(now), n, false)
}
