package shardlimit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// algorithm is what each of the four algorithms supplies to the shared
// limiter: its per-key record type E and the operations on it. Every method
// requires the shard's mutex held. Instants are Unix nanoseconds.
type algorithm[E any] interface {
	// init makes rec the state of a fresh key first seen at t, with lim word w.
	init(rec *E, t int64, w uint32)
	// decide applies cost n >= 0 at t. It consumes n only when consume is
	// true and the request is admitted. Unless full, only the verdict's
	// allowed bit is computed (Remaining, ResetAfter and RetryAfter may be
	// left 0): the bool-returning methods need no more, and the durations
	// cost divisions and scans.
	decide(s *shard[E], rec *E, side []uint32, t int64, n int, consume, full bool) verdict
	// idle reports whether rec's state at t equals a fresh key's. A key with
	// a limit of its own is never idle.
	idle(s *shard[E], rec *E, side []uint32, t int64) bool
	// relimit re-encodes rec's state, encoded for limit old (0: no usage
	// recorded), for limit lim > 0, keeping its usage.
	relimit(s *shard[E], rec *E, side []uint32, old, lim uint32)
	limitWord(rec *E) uint32
	setLimitWord(rec *E, w uint32)
	lastSeen(rec *E) int64
	// release frees storage rec owns outside the record (ring buffers).
	release(s *shard[E], rec *E)
	// compact tidies storage outside the records after a sweep of s.
	compact(s *shard[E])
	// syncLayout returns where the sync state lives, nil if not synced.
	syncLayout() *syncLayout
	// sideRef returns the field of rec that names its side words' entry
	// in the shard's slab, or nil if the algorithm keeps side words per
	// table position instead. init keeps the field as it is.
	sideRef(rec *E) *uint32
}

// limiter is the Limiter shared by the four algorithms.
type limiter[E any] struct {
	tab      table[E]
	alg      algorithm[E]
	cfg      Config // immutable but for Limit, which is defLimit
	defLimit atomic.Int64
	clock    Clock
	nano     nanoClock // the clock's allocation-free form, if it has one

	closed    atomic.Bool
	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}
}

// init sets up l, whose zero value it requires, and starts its janitor.
func (l *limiter[E]) init(cfg Config, stride int, alg algorithm[E]) {
	l.alg, l.cfg, l.clock = alg, cfg, cfg.Clock
	l.nano, _ = cfg.Clock.(nanoClock)
	l.defLimit.Store(int64(cfg.Limit))
	l.tab.init(cfg, stride, alg)
	if cfg.JanitorInterval > 0 {
		l.stop = make(chan struct{})
		l.done = make(chan struct{})
		go l.janitor(cfg.JanitorInterval)
	}
}

func (l *limiter[E]) now() int64 {
	if l.nano != nil {
		return l.nano.unixNano()
	}
	return unixNanos(l.clock.Now())
}

// decideKey is the hot path: validate, lock one shard, find or create the
// key, apply the algorithm, unlock.
func decideKey[E any, K keyBytes](l *limiter[E], key K, h uint64, t int64, n int, consume bool) Result {
	if n < 0 || t < 0 || len(key) == 0 || len(key) > l.tab.maxKeyBytes || l.closed.Load() {
		return l.invalid(n, t)
	}
	s := l.tab.shardFor(h)
	s.mu.Lock()
	var r Result
	if slot, ok := find(s, h, key); !ok && (!consume || n == 0 || n > int(s.defLimit)) {
		// Nothing would be stored: answer from a fresh key's state.
		l.alg.init(&s.scratch, t, s.defLimit)
		clear(s.scratchSd)
		r = l.alg.decide(s, &s.scratch, s.scratchSd, t, n, false, true).result()
		if consume && n > 0 {
			r.Allowed = false
		}
	} else if ok && (!consume || n == 0) {
		// A peek works on a copy: it changes no state.
		s.scratch = *s.rec(slot)
		copy(s.scratchSd, l.tab.sideOf(s, slot))
		t = s.stepCheck(slot, l.alg.lastSeen(&s.scratch), t, false)
		r = l.alg.decide(s, &s.scratch, s.scratchSd, t, n, false, true).result()
	} else {
		if !ok {
			var err error
			if slot, err = insert(&l.tab, s, h, key, t); err != nil {
				lim := int(s.defLimit) // guarded by mu
				s.mu.Unlock()
				return Result{Limit: lim, Err: err}
			}
			l.alg.init(s.rec(slot), t, s.defLimit)
		} else {
			t = s.stepCheck(slot, l.alg.lastSeen(s.rec(slot)), t, true)
		}
		side := l.tab.sideOf(s, slot)
		r = l.alg.decide(s, s.rec(slot), side, t, n, true, true).result()
		if l.tab.sync != nil {
			markTouched(s, l.tab.sync, slot, side)
		}
	}
	if consume && n > 0 {
		if r.Allowed {
			s.allowed++
		} else {
			s.denied++
		}
	}
	s.mu.Unlock()
	return r
}

// invalid returns the error result for a call that failed validation.
func (l *limiter[E]) invalid(n int, t int64) Result {
	switch {
	case l.closed.Load():
		return Result{Err: ErrClosed}
	case n < 0:
		return Result{Err: ErrInvalidCost}
	case t < 0:
		return Result{Err: ErrInvalidTime}
	}
	return Result{Err: ErrInvalidKey}
}

func (l *limiter[E]) checkKey(key string) error {
	switch {
	case l.closed.Load():
		return ErrClosed
	case len(key) == 0:
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > l.tab.maxKeyBytes:
		return fmt.Errorf("%w: key of %d bytes is longer than %d", ErrInvalidKey, len(key), l.tab.maxKeyBytes)
	}
	return nil
}

func (l *limiter[E]) SetLimit(key string, limit int) error {
	if err := checkLimit(l.cfg.Algorithm, limit); err != nil {
		return err
	}
	if err := l.checkKey(key); err != nil {
		return err
	}
	h := l.tab.hash(key)
	s := l.tab.shardFor(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, ok := find(s, h, key)
	if !ok {
		// The key has no history: its state is a fresh key's at the epoch,
		// so whatever instant its first decision comes with moves forward.
		var err error
		if slot, err = insert(&l.tab, s, h, key, 0); err != nil {
			return err
		}
		l.alg.init(s.rec(slot), 0, s.defLimit)
	}
	rec := s.rec(slot)
	w := l.alg.limitWord(rec)
	old := w & limitMask
	if limit == 0 {
		l.alg.setLimitWord(rec, ownLimit|zeroLimit|old)
		return nil
	}
	if uint32(limit) != old {
		l.alg.relimit(s, rec, l.tab.sideOf(s, slot), old, uint32(limit))
	}
	l.alg.setLimitWord(rec, ownLimit|uint32(limit))
	return nil
}

func (l *limiter[E]) ClearLimit(key string) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	h := l.tab.hash(key)
	s := l.tab.shardFor(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot, ok := find(s, h, key); ok {
		rec := s.rec(slot)
		l.alg.setLimitWord(rec, l.alg.limitWord(rec)&limitMask)
	}
	return nil
}

func (l *limiter[E]) SetDefaultLimit(limit int) error {
	if err := checkLimit(l.cfg.Algorithm, limit); err != nil {
		return err
	}
	if l.closed.Load() {
		return ErrClosed
	}
	l.defLimit.Store(int64(limit))
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		s.mu.Lock()
		s.defLimit = uint32(limit)
		s.mu.Unlock()
	}
	return nil
}

func (l *limiter[E]) Reset(key string) error {
	if err := l.checkKey(key); err != nil {
		return err
	}
	h := l.tab.hash(key)
	s := l.tab.shardFor(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, ok := find(s, h, key)
	if !ok {
		return nil
	}
	rec := s.rec(slot)
	w := l.alg.limitWord(rec)
	if w&ownLimit == 0 {
		l.tab.evict(s, slot)
		return nil
	}
	last := l.alg.lastSeen(rec)
	l.alg.release(s, rec)
	side := l.tab.sideOf(s, slot)
	if y := l.tab.sync; y != nil {
		// Unsent units leave with the key's state: counted dropped, as
		// evict counts them.
		delta, _, _ := y.arrays(side)
		var lost uint64
		for _, d := range delta {
			lost += uint64(d)
		}
		s.syncDropped.Add(lost)
	}
	clear(side)
	l.alg.init(rec, last, w)
	return nil
}

func (l *limiter[E]) Len() int {
	n := int64(0)
	for i := range l.tab.shards {
		n += l.tab.shards[i].keys.Load()
	}
	return int(n)
}

func (l *limiter[E]) Stats() Stats {
	var st Stats
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		s.mu.Lock()
		st.Allowed += s.allowed
		st.Denied += s.denied
		s.mu.Unlock()
		st.Evicted += s.evicted.Load()
		st.Keys += int(s.keys.Load())
	}
	return st
}

func (l *limiter[E]) Sweep(now time.Time) int {
	t := unixNanos(now)
	if l.closed.Load() || t < 0 {
		return 0
	}
	return l.tab.sweep(t, nil)
}

func (l *limiter[E]) Config() Config {
	cfg := l.cfg
	cfg.Limit = int(l.defLimit.Load())
	return cfg
}

func (l *limiter[E]) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		if l.stop != nil {
			close(l.stop)
			<-l.done
		}
	})
	return nil
}

// janitor sweeps the table every interval until Close.
func (l *limiter[E]) janitor(interval time.Duration) {
	defer close(l.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
			if t := unixNanos(l.clock.Now()); t >= 0 {
				l.tab.sweep(t, l.stop)
			}
		}
	}
}
