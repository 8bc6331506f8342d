package shardlimit

import (
	"fmt"
	"math"
	"time"

	"github.com/shardlimit/shardlimit/internal/shared"
)

// Sync state: what a limiter built for package sync keeps per key to share
// its counts with other nodes through a store, in the key's side words after
// the algorithm's own:
//
//	[off]           flags (syncTouched: a decision since the last Collect)
//	[off+1, off+2]  id of the newest bucket the arrays describe (int64)
//	[off+3, ...]    delta[m], sent[m], remote[m]
//
// Bucket id b holds the units of [b*G, (b+1)*G); the arrays are rings
// indexed b mod m and cover the m newest buckets: for a fixed window m = 1
// and G = W, for the sliding counter and log m = n+1 and G = W/n. delta is
// what this node admitted and has not sent, sent what it sent in total,
// remote the other nodes' units as last read from the store.

const syncTouched = 1

type syncLayout struct {
	off    int   // first side word of the sync state
	m      int   // buckets kept
	bucket int64 // G, ns
}

func (y *syncLayout) words() int { return 3 + 3*y.m }

func (y *syncLayout) idx(id int64) int {
	i := id % int64(y.m)
	if i < 0 {
		i += int64(y.m)
	}
	return int(i)
}

func (y *syncLayout) head(side []uint32) int64 {
	return int64(uint64(side[y.off+1]) | uint64(side[y.off+2])<<32)
}

func (y *syncLayout) setHead(side []uint32, id int64) {
	side[y.off+1], side[y.off+2] = uint32(id), uint32(uint64(id)>>32)
}

func (y *syncLayout) arrays(side []uint32) (delta, sent, remote []uint32) {
	a := y.off + 3
	return side[a : a+y.m], side[a+y.m : a+2*y.m], side[a+2*y.m : a+3*y.m]
}

// rotate moves the rings to newest bucket j, clearing the buckets that
// leave, and returns the unsent units it dropped with them.
func (y *syncLayout) rotate(side []uint32, j int64) (dropped uint32) {
	h := y.head(side)
	if j <= h {
		return 0
	}
	delta, sent, remote := y.arrays(side)
	if j-h >= int64(y.m) {
		for i := range delta {
			dropped += delta[i]
		}
		clear(delta)
		clear(sent)
		clear(remote)
	} else {
		for id := h + 1; id <= j; id++ {
			i := y.idx(id)
			dropped += delta[i]
			delta[i], sent[i], remote[i] = 0, 0, 0
		}
	}
	y.setHead(side, j)
	return dropped
}

// bucketOf returns the id of the bucket holding instant t: the rings'
// newest bucket without a division when t is still in it.
func (y *syncLayout) bucketOf(side []uint32, t int64) int64 {
	h := y.head(side)
	if d := t - h*y.bucket; d >= 0 && d < y.bucket {
		return h
	}
	return floorDiv(t, y.bucket)
}

// kept returns the ring index of bucket id, and false if the rings no
// longer (or not yet) keep it.
func (y *syncLayout) kept(side []uint32, id int64) (int, bool) {
	h := y.head(side)
	if id > h || id <= h-int64(y.m) {
		return 0, false
	}
	return y.idx(id), true
}

// remote returns the other nodes' units in bucket id, 0 if the rings do
// not cover it.
func (y *syncLayout) remote(side []uint32, id int64) uint32 {
	i, ok := y.kept(side, id)
	if !ok {
		return 0
	}
	_, _, remote := y.arrays(side)
	return remote[i]
}

// estimate returns the other nodes' units in the window ending at key time
// t (policy S2 over the remote ring): the m-1 newest buckets in full and
// the one straddling t-W weighted by its overlap, rounded up.
func (y *syncLayout) estimate(side []uint32, t int64) int64 {
	j := y.bucketOf(side, t)
	n := int64(y.m - 1)
	var sum int64
	for id := j - n + 1; id <= j; id++ {
		sum += int64(y.remote(side, id))
	}
	straddler := uint64(y.remote(side, j-n))
	return sum + int64(mulDivCeil(straddler, uint64(y.bucket-(t-j*y.bucket)), uint64(y.bucket)))
}

// holds reports whether a key's sync words still matter at key time t:
// units not yet sent, or other nodes' units still counted. Such a key is
// not idle (the janitor must not evict it): its units would be lost to the
// other nodes, or this node would forget theirs.
func (y *syncLayout) holds(side []uint32, t int64) bool {
	delta, _, _ := y.arrays(side)
	h := y.head(side)
	for id := h - int64(y.m) + 1; id <= h; id++ {
		// A flush still sends a bucket's units until (id+m)*G (Shared's
		// flush drops them from then on).
		if delta[y.idx(id)] != 0 && (id+int64(y.m))*y.bucket > t {
			return true
		}
	}
	if y.m == 1 {
		return y.remote(side, floorDiv(t, y.bucket)) != 0
	}
	return y.estimate(side, t) != 0
}

// add records n units admitted locally in bucket id.
func (y *syncLayout) add(side []uint32, id int64, n uint32) {
	delta, _, _ := y.arrays(side)
	delta[y.idx(id)] += n
}

// markTouched queues slot for the next Collect. Requires s.mu held.
func markTouched[E any](s *shard[E], y *syncLayout, slot uint32, side []uint32) {
	if side[y.off]&syncTouched == 0 {
		side[y.off] |= syncTouched
		s.dirty = append(s.dirty, slot)
	}
}

func init() {
	shared.NewTable = newShared
}

// newShared builds a limiter that keeps sync state (see shared.Table).
func newShared(c any) (shared.Table, error) {
	cfg, ok := c.(Config)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a shardlimit.Config", ErrInvalidConfig, c)
	}
	alg := cfg.Algorithm
	cfg, err := cfg.withDefaults(alg)
	if err != nil {
		return nil, err
	}
	if len(cfg.Rates) > 1 {
		return nil, fmt.Errorf("%w: several rates are not shared yet", ErrInvalidConfig)
	}
	rs := newRateSet(cfg)
	w, n := rs.window[0], int64(cfg.Buckets)
	if alg != FixedWindow && w%n != 0 {
		return nil, fmt.Errorf("%w: window %v is not a multiple of %d buckets in nanoseconds", ErrInvalidConfig, time.Duration(w), n)
	}
	switch alg {
	case FixedWindow:
		y := &syncLayout{off: 0, m: 1, bucket: w}
		l := &fixedLimiter{}
		l.init(cfg, &rs, &fixedWindow{rates: 1, window: rs.window, sync: y}, y.words(), 0, y)
		return l, nil
	case SlidingCounter:
		y := &syncLayout{off: int(n) + 1, m: int(n) + 1, bucket: w / n}
		a := newSlidingCounter(&rs, n, y)
		l := &counterLimiter{}
		l.init(cfg, &rs, a, a.stride, 0, y)
		return l, nil
	case SlidingLog:
		y := &syncLayout{off: 0, m: int(n) + 1, bucket: w / n}
		a := newSlidingLog(&rs, cfg.Clock, y)
		l := &logLimiter{}
		l.init(cfg, &rs, a, a.stride, 0, y)
		return l, nil
	}
	return nil, fmt.Errorf("%w: %v is shared through Redis in exact mode only (package sync, NewExact)", ErrInvalidConfig, alg)
}

func (l *limiter[E]) Buckets() (size int64, count int) {
	return l.tab.sync.bucket, l.tab.sync.m
}

func (l *limiter[E]) Shards() int { return len(l.tab.shards) }

func (l *limiter[E]) Collect(i int, dst []shared.Flush) []shared.Flush {
	y := l.tab.sync
	s := &l.tab.shards[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	words := make([]uint32, 0, 2*y.m*len(s.dirty))
	for _, slot := range s.dirty {
		if int(slot) >= len(s.recs) || !s.stored(int(slot)) {
			continue
		}
		side, _ := l.tab.sideOf(s, slot)
		if side[y.off]&syncTouched == 0 {
			continue
		}
		side[y.off] &^= syncTouched
		delta, sent, _ := y.arrays(side)
		head := y.head(side)
		f := shared.Flush{Key: string(s.keyOf(slot)), Newest: head}
		start := len(words)
		for k := range y.m {
			words = append(words, delta[y.idx(head-int64(y.m-1-k))])
		}
		for k := range y.m {
			i := y.idx(head - int64(y.m-1-k))
			sent[i] += delta[i]
			delta[i] = 0
			words = append(words, sent[i])
		}
		f.Deltas = words[start : start+y.m : start+y.m]
		f.Sent = words[start+y.m : start+2*y.m : start+2*y.m]
		dst = append(dst, f)
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

func (l *limiter[E]) Apply(f *shared.Flush, totals []int64) {
	s, _, side := l.syncSide(f.Key)
	if s == nil {
		return
	}
	defer s.mu.Unlock()
	y := l.tab.sync
	_, sent, remote := y.arrays(side)
	for k, total := range totals {
		i, ok := y.kept(side, f.Newest-int64(len(totals)-1-k))
		if !ok {
			continue
		}
		remote[i] = uint32(min(max(0, total-int64(sent[i])), math.MaxUint32))
	}
}

func (l *limiter[E]) Restore(f *shared.Flush) {
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
	y := l.tab.sync
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
	markTouched(s, y, slot, side)
}

func (l *limiter[E]) Forget(f *shared.Flush) {
	s, _, side := l.syncSide(f.Key)
	if s == nil {
		return
	}
	defer s.mu.Unlock()
	y := l.tab.sync
	_, sent, _ := y.arrays(side)
	for k, d := range f.Deltas {
		if i, ok := y.kept(side, f.Newest-int64(len(f.Deltas)-1-k)); ok {
			sent[i] -= min(sent[i], d)
		}
	}
}

// Touch brings key to instant t as a decision of cost 0 would (its windows
// and sync rings move forward; an instant behind the key's latest changes
// nothing) and queues it for the next Collect. It reports whether the key
// is stored.
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
