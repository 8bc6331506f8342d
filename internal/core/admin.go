package core

import "time"

// The limiter's methods besides its decisions (decide.go), its limits and
// Reset (limits.go): Len, Stats, Sweep, Config and Close.

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
		st.Refused += s.refused
		s.mu.Unlock()
		st.Evicted += s.evicted.Load()
		st.Keys += int(s.keys.Load())
	}
	return st
}

func (l *limiter[E]) Sweep(now time.Time) int {
	t := l.tl.instant(now)
	if l.closed.Load() || t < 0 {
		return 0
	}
	return l.tab.sweep(t, nil)
}

func (l *limiter[E]) Config() Config {
	l.defMu.Lock()
	defer l.defMu.Unlock()
	cfg := l.cfg
	if len(cfg.Rates) == 0 {
		cfg.Limit = l.defaults[0]
	} else {
		cfg.Rates = make([]Rate, len(l.cfg.Rates))
		for i, r := range l.cfg.Rates {
			cfg.Rates[i] = Rate{Limit: l.defaults[i], Window: r.Window}
		}
	}
	return cfg
}

func (l *limiter[E]) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.closeWait()
		if l.jan != nil {
			sweeper.remove(l.jan)
		}
	})
	return nil
}
