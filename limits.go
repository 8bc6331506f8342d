package shardlimit

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
		// The key has no history: its state is a fresh key's at the
		// shard's floor, so whatever instant its first decision comes
		// with moves forward.
		var err error
		if slot, err = insert(&l.tab, s, h, key, s.floor); err != nil {
			return err
		}
		l.alg.init(s.rec(slot), s.floor, s.defLimit)
	}
	rec := s.rec(slot)
	w := l.alg.limitWord(rec)
	old := *w & limitMask
	if limit == 0 {
		*w = ownLimit | zeroLimit | old
		return nil
	}
	if uint32(limit) != old && l.relimit != nil {
		l.relimit.relimit(s, rec, old, uint32(limit))
	}
	*w = ownLimit | uint32(limit)
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
		*l.alg.limitWord(s.rec(slot)) &= limitMask
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
	w := *l.alg.limitWord(rec)
	last := l.alg.lastSeen(rec)
	if w&ownLimit == 0 {
		l.tab.evict(s, slot, last)
		return nil
	}
	if o := l.tab.owner; o != nil {
		o.release(s, rec)
	}
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
