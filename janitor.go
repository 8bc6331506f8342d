package shardlimit

import "time"

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
			if t := l.now(); t >= 0 {
				l.tab.sweep(t, l.stop)
			}
		}
	}
}
