package core

import (
	"fmt"
	"math"
	"time"
)

// The limiter built for package sync: the sync state's types as the
// reconciler sees them, and the operations it performs on them.

// SyncRate describes one rate (limit and window pair) of a Synced
// limiter as its sync state keeps it.
type SyncRate struct {
	// Window is the rate's window in nanoseconds.
	Window int64
	// Size is the length of one of the rate's sync buckets in nanoseconds:
	// the window for a fixed window, window/n for the sliding counter and
	// log of n buckets.
	Size int64
	// Count is how many buckets a key keeps for the rate: the window's
	// buckets plus the one that straddles the window's start; 1 for a
	// fixed window.
	Count int
}

// Flush is one key's state of one rate handed to the reconciler by
// Collect. Its slices describe the rate's live buckets, oldest first: index
// i is bucket Newest-len(Deltas)+1+i.
type Flush struct {
	// Key is the limiter key.
	Key string
	// Rate is the index of the rate in the Synced limiter's SyncRates.
	Rate int
	// Newest is the id of the key's newest live bucket of the rate:
	// floor(t / size) for the key's latest instant t.
	Newest int64
	// Deltas are the units admitted locally and not yet sent, per bucket.
	// Collect moved them to Sent.
	Deltas []uint32
	// Sent are the units this node has sent for each bucket in total,
	// including Deltas: the floor a store that lost data is healed to.
	Sent []uint32
}

// Synced is a limiter that keeps the per-key sync state (see syncstate.go)
// and the operations package sync's reconciler performs on it. All methods
// are safe for concurrent use with the limiter's decisions.
type Synced interface {
	Limiter
	// SyncRates returns the table's rates, longest window first (a Flush's
	// Rate indexes it): one for a limiter of one rate, at most
	// MaxRates. An admitted unit counts in every rate, each with
	// buckets of its own.
	SyncRates() []SyncRate
	// Shards returns the number of shards; Collect works on one at a time.
	Shards() int
	// Collect appends to dst, for every key of shard i that had a decision
	// since the last Collect, one Flush per rate (in the order of SyncRates,
	// one key's Flushes together), moving its deltas to sent. It takes the
	// shard's lock once. Deltas and Sent of the returned Flushes share one
	// backing array per call; one key's Flushes share its Key.
	Collect(i int, dst []Flush) []Flush
	// Apply records the cluster totals of f's buckets of rate f.Rate (same
	// order as f.Deltas; a shorter totals covers the newest buckets) for the
	// buckets the key still keeps: remote = max(remote, total - sent). The
	// other nodes' units of a live bucket only grow, so a total that says
	// fewer than last read means the store lost them (evicted the
	// counter, restarted empty, failed over; until they flush the key
	// again, which restores their shares): the key keeps counting what it
	// read. Apply returns by how many units the newest of totals fell
	// short of that, 0 if it did not or its bucket is not kept. Only the
	// newest is judged: the reconciler's write restored this node's own
	// share of that bucket (Item.Floor) in the step that read it, so its
	// shortfall is the other nodes' units alone, while an older bucket may
	// also lack this node's units of a write whose reply was lost.
	// Restore and Forget, too, work on the rate f.Rate.
	Apply(f *Flush, totals []int64) (lost int64)
	// Restore gives back f's deltas, which provably did not reach the
	// store, for the buckets the key still keeps; the key is collected again.
	// Deltas it cannot give back (the key was evicted, or the bucket left
	// its rings) are counted dropped.
	Restore(f *Flush)
	// Forget takes f's deltas, which the reconciler dropped unsent (their
	// bucket ended by its clock), out of what the key counts as sent, for
	// the buckets the key still keeps, so no later floor writes them to
	// the store.
	Forget(f *Flush)
	// Touch brings key to instant t (Unix nanoseconds) as a decision of
	// cost 0 would, moving its windows and sync rings forward (never
	// back), and queues it for the next Collect, so the reconciler can
	// read the other nodes' units of the bucket of t for a key that had no
	// decision in it yet. It reports whether the key is stored.
	Touch(key string, t int64) bool
	// Remaining returns how many units rate k (an index into SyncRates) of key
	// admits at t (Unix nanoseconds), the other nodes' units included, as a
	// peek at t of that rate alone reports them; false if key is not
	// stored. It changes nothing.
	Remaining(key string, t int64, k int) (int, bool)
	// TakePending reports whether a key was queued for Collect since the
	// last TakePending (a decision, Touch or Restore), and clears that: a
	// reconciler that finds none can skip Collect, whose shard locks cost
	// what an idle limiter need not. It takes no lock. Pending reports the
	// same without clearing it.
	TakePending() bool
	Pending() bool
	// SetQueueHook makes every queueing of a key for Collect call f, under
	// the key's shard lock (f must be quick and must not call the
	// limiter). Call it before the limiter's first decision.
	SetQueueHook(f func())
	// SyncStats returns units whose bucket ended before they were sent
	// (dropped; with several rates, per rate: a unit dropped from two
	// rates counts twice) and the keys with pending state (dirty).
	SyncStats() (dropped uint64, dirty int)
}

// NewSynced returns a limiter for package sync: cfg.Algorithm's (FixedWindow,
// SlidingCounter or SlidingLog; GCRA is shared in exact mode only) keeping
// per key, besides the algorithm's state, the sync state its reconciler
// collects and fills in. It returns an error wrapping ErrInvalidConfig if
// cfg is invalid.
func NewSynced(cfg Config) (Synced, error) {
	alg := cfg.Algorithm
	cfg, err := cfg.withDefaults(alg)
	if err != nil {
		return nil, err
	}
	rs := newRateSet(cfg)
	n := int64(cfg.Buckets)
	for k := range rs.n {
		if w := rs.window[k]; alg != FixedWindow && w%n != 0 {
			return nil, fmt.Errorf("%w: window %v is not a multiple of %d buckets in nanoseconds", ErrInvalidConfig, time.Duration(w), n)
		}
	}
	switch alg {
	case FixedWindow:
		y := newSyncSet(0, alg, &rs, 1)
		l := &FixedLimiter{}
		l.init(cfg, &rs, &fixedWindow{rates: rs.n, window: rs.window}, y.words(), rs.n-1, y)
		return l, nil
	case SlidingCounter:
		a := newSlidingCounter(&rs, n)
		y := newSyncSet(a.stride, alg, &rs, n) // after the counters
		l := &CounterLimiter{}
		l.init(cfg, &rs, a, a.stride+y.words(), rs.n-1, y)
		return l, nil
	case SlidingLog:
		y := newSyncSet(0, alg, &rs, n)
		l := &LogLimiter{}
		l.init(cfg, &rs, newSlidingLog(&rs), y.words(), rs.n-1, y)
		return l, nil
	}
	return nil, fmt.Errorf("%w: %v is shared through Redis in exact mode only (package sync, NewExact)", ErrInvalidConfig, alg)
}

func (l *limiter[E]) SyncRates() []SyncRate {
	y := l.tab.sync
	out := make([]SyncRate, y.rates)
	for k := range out {
		out[k] = SyncRate{Window: l.rates.window[k], Size: y.rate[k].bucket, Count: y.rate[k].m}
	}
	return out
}

func (l *limiter[E]) Shards() int { return len(l.tab.shards) }

func (l *limiter[E]) TakePending() bool {
	y := l.tab.sync
	return y.pending.Load() && y.pending.Swap(false)
}

func (l *limiter[E]) Pending() bool { return l.tab.sync.pending.Load() }

func (l *limiter[E]) SetQueueHook(f func()) { l.tab.sync.hook = f }

func (l *limiter[E]) Collect(i int, dst []Flush) []Flush {
	y := l.tab.sync
	s := &l.tab.shards[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0 // buckets of all rates
	for k := range y.rates {
		m += y.rate[k].m
	}
	words := make([]uint32, 0, 2*m*len(s.dirty))
	for _, slot := range s.dirty {
		if int(slot) >= len(s.recs) || !s.stored(int(slot)) {
			continue
		}
		side, _ := l.tab.sideOf(s, slot)
		if side[y.flags]&syncTouched == 0 {
			continue
		}
		side[y.flags] &^= syncTouched
		key := string(s.keyOf(slot))
		for k := range y.rates {
			r := &y.rate[k]
			delta, sent, _ := r.arrays(side)
			head := r.head(side)
			start := len(words)
			for b := range r.m {
				words = append(words, delta[r.idx(head-int64(r.m-1-b))])
			}
			for b := range r.m {
				i := r.idx(head - int64(r.m-1-b))
				sent[i] += delta[i]
				delta[i] = 0
				words = append(words, sent[i])
			}
			dst = append(dst, Flush{Key: key, Rate: k, Newest: head,
				Deltas: words[start : start+r.m : start+r.m],
				Sent:   words[start+r.m : start+2*r.m : start+2*r.m]})
		}
	}
	s.dirty = s.dirty[:0]
	return dst
}

// syncSide locks the shard of key and returns it with the key's side
// words, or nil (lock released) if the key is not stored.
func (l *limiter[E]) syncSide(key string) (*shard[E], uint32, []uint32) {
	h := l.tab.hash(key)
	s := l.tab.shardFor(h)
	s.mu.Lock()
	slot, ok := find(s, h, key)
	if !ok {
		s.mu.Unlock()
		return nil, 0, nil
	}
	side, _ := l.tab.sideOf(s, slot)
	return s, slot, side
}

// layout returns the sync layout of the limiter's rate k (an index into
// Rates, as a Flush names it).
func (l *limiter[E]) layout(k int) *syncLayout {
	y := l.tab.sync
	return &y.rate[:y.rates][k]
}

func (l *limiter[E]) Apply(f *Flush, totals []int64) (lost int64) {
	s, _, side := l.syncSide(f.Key)
	if s == nil {
		return 0
	}
	defer s.mu.Unlock()
	y := l.layout(f.Rate)
	_, sent, remote := y.arrays(side)
	for k, total := range totals {
		i, ok := y.kept(side, f.Newest-int64(len(totals)-1-k))
		if !ok {
			continue
		}
		others := min(max(0, total-int64(sent[i])), math.MaxUint32)
		if old := int64(remote[i]); others < old {
			// Never forget units read in a live bucket.
			if k == len(totals)-1 {
				lost = old - others
			}
			continue
		}
		remote[i] = uint32(others)
	}
	return lost
}

func (l *limiter[E]) Restore(f *Flush) {
	s, slot, side := l.syncSide(f.Key)
	if s == nil {
		// The key was evicted while its flush was out: its units can be
		// sent no more, and are counted dropped.
		var lost uint64
		for _, d := range f.Deltas {
			lost += uint64(d)
		}
		l.tab.shardFor(l.tab.hash(f.Key)).syncDropped.Add(lost)
		return
	}
	defer s.mu.Unlock()
	y := l.layout(f.Rate)
	delta, sent, _ := y.arrays(side)
	for k, d := range f.Deltas {
		if d == 0 {
			continue
		}
		i, ok := y.kept(side, f.Newest-int64(len(f.Deltas)-1-k))
		if !ok {
			s.syncDropped.Add(uint64(d)) // its bucket left the rings meanwhile
			continue
		}
		delta[i] += d
		sent[i] -= min(sent[i], d)
	}
	markTouched(s, l.tab.sync, slot, side)
}

func (l *limiter[E]) Forget(f *Flush) {
	s, _, side := l.syncSide(f.Key)
	if s == nil {
		return
	}
	defer s.mu.Unlock()
	y := l.layout(f.Rate)
	_, sent, _ := y.arrays(side)
	for k, d := range f.Deltas {
		if i, ok := y.kept(side, f.Newest-int64(len(f.Deltas)-1-k)); ok {
			sent[i] -= min(sent[i], d)
		}
	}
}

// Touch brings key to instant t as a decision of cost 0 would (the windows
// and sync rings of all its rates move forward; an instant behind the
// key's latest changes nothing) and queues it for the next Collect. It
// reports whether the key is stored.
func (l *limiter[E]) Touch(key string, t int64) bool {
	h := l.tab.hash(key)
	s := l.tab.shardFor(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, ok := find(s, h, key)
	if !ok {
		return false
	}
	if rec := s.rec(slot); t > l.alg.lastSeen(rec) {
		l.decide(s, rec, slot, t, 0, consume)
	}
	side, _ := l.tab.sideOf(s, slot)
	markTouched(s, l.tab.sync, slot, side)
	return true
}

// Remaining returns the units rate k of key admits at t as a peek of that
// rate alone reports them (the other nodes' units included): false if key
// is not stored. It changes nothing.
func (l *limiter[E]) Remaining(key string, t int64, k int) (int, bool) {
	_ = l.layout(k) // k is a rate
	h := l.tab.hash(key)
	s := l.tab.shardFor(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, ok := find(s, h, key)
	if !ok {
		return 0, false
	}
	s.scratch = *s.rec(slot)
	side, extra := l.tab.sideOf(s, slot)
	copy(s.scratchSd, side)
	copy(s.scratchEx, extra)
	mode := full
	if k > 0 {
		// Rate 0 first, as every decision does: the sliding log's ring
		// moves there.
		l.alg.decide(s, &s.scratch, scratchSlot, t, 0, mode)
		return l.alg.decide(s, &s.scratchEx[k-1], scratchSlot, t, 0, mode.withRate(k)).remaining(), true
	}
	return l.alg.decide(s, &s.scratch, scratchSlot, t, 0, mode).remaining(), true
}

func (l *limiter[E]) SyncStats() (dropped uint64, dirty int) {
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		dropped += s.syncDropped.Load()
		s.mu.Lock()
		dirty += len(s.dirty)
		s.mu.Unlock()
	}
	return dropped, dirty
}
