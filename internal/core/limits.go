package core

import "fmt"

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

// checkLimits validates limits, one per rate in the order of Config.Rates.
func (l *limiter[E]) checkLimits(limits []int) error {
	if len(limits) != l.rates.n {
		return fmt.Errorf("%w: %d limits for %d rates", ErrInvalidConfig, len(limits), l.rates.n)
	}
	for _, lim := range limits {
		if err := checkLimit(l.cfg.Algorithm, lim); err != nil {
			return err
		}
	}
	return nil
}

// rateWords returns the lim words of the key in slot, one per rate in the
// limiter's order. Requires s.mu held.
func (l *limiter[E]) rateWords(s *shard[E], slot uint32) [MaxRates]*uint32 {
	var w [MaxRates]*uint32
	w[0] = l.alg.limitWord(s.rec(slot))
	if l.rates.n > 1 {
		_, extra := l.tab.sideOf(s, slot)
		for k := range extra {
			w[k+1] = l.alg.limitWord(&extra[k])
		}
	}
	return w
}

func (l *limiter[E]) SetLimit(key string, limit int) error {
	return l.SetLimits(key, limit)
}

func (l *limiter[E]) SetLimits(key string, limits ...int) error {
	if err := l.checkLimits(limits); err != nil {
		return err
	}
	s, h, err := l.lockKey(key)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	slot, ok := find(s, h, key)
	if !ok {
		// The key has no history: its state is a fresh key's at the
		// shard's floor, so whatever instant its first decision comes
		// with moves forward.
		var err error
		if slot, err = insert(&l.tab, s, h, key, s.floor); err != nil {
			return err
		}
		l.alg.init(s, s.rec(slot), slot, s.floor)
	}
	words := l.rateWords(s, slot)
	for k, w := range words[:l.rates.n] {
		lim := uint32(limits[l.rates.order[k]])
		old := *w & limitMask
		if lim == 0 {
			*w = ownLimit | zeroLimit | old
			continue
		}
		if lim != old && l.relimit != nil {
			l.relimit.relimit(s, s.rec(slot), slot, k, old, lim)
		}
		*w = ownLimit | lim
	}
	return nil
}

// lockKey validates key and locks its shard: the shard, locked unless
// err is set, and the key's hash.
func (l *limiter[E]) lockKey(key string) (*shard[E], uint64, error) {
	if err := l.checkKey(key); err != nil {
		return nil, 0, err
	}
	h := l.tab.hash(key)
	s := l.tab.shardFor(h)
	s.mu.Lock()
	return s, h, nil
}

func (l *limiter[E]) ClearLimit(key string) error {
	s, h, err := l.lockKey(key)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if slot, ok := find(s, h, key); ok {
		words := l.rateWords(s, slot)
		for _, w := range words[:l.rates.n] {
			*w &= limitMask
		}
	}
	return nil
}

func (l *limiter[E]) SetDefaultLimit(limit int) error {
	return l.SetDefaultLimits(limit)
}

func (l *limiter[E]) SetDefaultLimits(limits ...int) error {
	if err := l.checkLimits(limits); err != nil {
		return err
	}
	if l.closed.Load() {
		return ErrClosed
	}
	l.defMu.Lock()
	defer l.defMu.Unlock()
	copy(l.defaults, limits)
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		s.mu.Lock()
		for k := range l.rates.n {
			s.defLimits[k] = uint32(limits[l.rates.order[k]])
		}
		s.mu.Unlock()
	}
	return nil
}

func (l *limiter[E]) Reset(key string) error {
	s, h, err := l.lockKey(key)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	slot, ok := find(s, h, key)
	if !ok {
		return nil
	}
	rec := s.rec(slot)
	last := l.alg.lastSeen(rec)
	s.forget(l.alg.latest(s, rec, slot)) // a refund of a decision before the Reset gives nothing
	if *l.alg.limitWord(rec)&ownLimit == 0 {
		// Forgotten: its next request is a new key's, decided no earlier
		// than its latest instant (capped by the clock, as every
		// eviction's), so a request read before the Reset cannot spend
		// a window twice.
		l.tab.evictAt(s, slot, min(last, l.tab.clock()))
		return nil
	}
	// A key with limits of its own keeps them (its lim words); init
	// forgets its usage.
	if o := l.tab.owner; o != nil {
		o.release(s, rec)
	}
	side, _ := l.tab.sideOf(s, slot)
	if y := l.tab.sync; y != nil {
		// Unsent units leave with the key's state: counted dropped, as
		// evict counts them.
		s.syncDropped.Add(y.forget(side))
	}
	l.alg.init(s, rec, slot, last)
	return nil
}
