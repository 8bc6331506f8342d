package sync

import (
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/zeebo/xxh3"
)

// DefaultDenyCacheKeys is the number of keys an Exact limiter's deny cache
// holds when ExactConfig.DenyCacheKeys is zero.
const DefaultDenyCacheKeys = 1024

// maxDenyCacheKeys bounds ExactConfig.DenyCacheKeys.
const maxDenyCacheKeys = 1 << 20

// denyStripes is the number of lock stripes of a deny cache (a power of
// two).
const denyStripes = 64

// A denyCache remembers, per key, the store's last denial of one unit
// (cost 1, what Allow and the middleware ask) while it still holds. No
// process can consume a unit of a key on which no unit fits, on any of its
// rates, so the key's state in the store stands still until time frees a
// unit: every later request of one unit is denied by the store too, and its
// Result (Limit, Remaining 0, ResetAfter, RetryAfter, Window) is the
// denial's, its durations shorter by the time elapsed. So Exact answers
// it here, with no round trip, until the binding rate's own wait (the
// instant at which the Result's fields would first change) measured from
// the caller's instant of the denied call. Units given back (a refund, a
// Reset) and limits changed in this process invalidate the key (see
// invalidate); those given back by another process are not seen, and the
// cache denies until that instant where the store would admit: the strict
// side, never an admission the store would refuse.
//
// A denial of more than one unit is not cached: smaller requests may still
// fit, and be admitted meanwhile, so it proves no Result exactly. Nor is
// one that no wait can end (RetryAfter Never: a limit of 0).
//
// Each stripe holds a fixed number of entries (allocated at its first
// denial) and evicts the one that ends first; a stripe's generation
// counts its invalidations, so a denial whose call was sent before one is
// not cached after it. Safe for concurrent use; lookups and inserts do not
// allocate.
type denyCache struct {
	stripes [denyStripes]denyStripe
	seed    uint64
	ways    int           // entries per stripe; 0: the cache is off
	hits    atomic.Uint64 // decisions answered by the cache (counted by Exact.decide)
}

type denyStripe struct {
	mu      stdsync.Mutex
	gen     uint64      // invalidations so far
	entries []denyEntry // nil until the stripe's first denial
	_       [24]byte
}

// denyEntry is one key's cached denial. Instants are the caller's, Unix µs.
type denyEntry struct {
	hash  uint64
	key   string
	from  int64 // the instant of the denied call
	until int64 // the binding rate's wait ends: one unit may fit, or a field change; 0: free
	retry int64 // the Result's RetryAfter ends: every rate admits a unit
	reset int64 // the binding rate's ResetAfter ends
	limit int32 // of the binding rate
	rate  uint8 // index of the binding rate in Exact.rates
}

// denyTicket is what a lookup saw of key's stripe, to cache the call's
// denial only if nothing was invalidated meanwhile.
type denyTicket struct {
	hash, gen uint64
}

// newDenyCache returns a cache of about keys keys (0 keys: off).
func newDenyCache(keys int) *denyCache {
	c := &denyCache{seed: uint64(time.Now().UnixNano())}
	if keys > 0 {
		c.ways = max(1, (keys+denyStripes-1)/denyStripes)
	}
	return c
}

// lookup returns the cached denial of a request of cost n for key at at
// (the caller's instant, Unix µs) as a Result, and whether there is one,
// with the ticket for remember (for any n). rates are the limiter's.
func (c *denyCache) lookup(key string, at int64, n int, rates []exactRate) (shardlimit.Result, bool, denyTicket) {
	if c.ways == 0 {
		return shardlimit.Result{}, false, denyTicket{}
	}
	h := xxh3.HashStringSeed(key, c.seed)
	s := &c.stripes[h&(denyStripes-1)]
	s.mu.Lock()
	defer s.mu.Unlock()
	t := denyTicket{hash: h, gen: s.gen}
	if en := s.find(h, key); en != nil && n == 1 && at < en.until {
		return en.result(at, rates), true, t
	}
	return shardlimit.Result{}, false, t
}

// result returns the denial en proves for a request of one unit at at <
// en.until.
func (en *denyEntry) result(at int64, rates []exactRate) shardlimit.Result {
	return shardlimit.Result{
		Limit:      int(en.limit),
		ResetAfter: time.Duration(max(0, en.reset-at)) * time.Microsecond,
		RetryAfter: time.Duration(en.retry-at) * time.Microsecond,
		Window:     rates[en.rate].window,
	}
}

// remember records the store's decision d of a request of cost n for key
// at at (the caller's instant of the call, Unix µs, read before it was
// sent). A denial of one unit is cached, unless key's stripe was
// invalidated since t was taken or key holds the denial of a later call.
// A decision at or after the instant a cached denial of key ends, or one
// that admitted units, ends that denial: the store has gone past it, and
// a request behind the store's instant is decided at the store's.
func (c *denyCache) remember(t denyTicket, key string, at int64, n int, d *storeDecision, rates []exactRate) {
	if c.ways == 0 {
		return
	}
	en, ok := denialOf(t.hash, key, at, n, d, rates)
	s := &c.stripes[t.hash&(denyStripes-1)]
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.find(t.hash, key)
	switch {
	case old != nil && old.from > at:
		// A later call's decision is in: this one's adds nothing.
	case !ok:
		if old != nil && (at >= old.until || d.res.Allowed && n > 0) {
			*old = denyEntry{} // the store went past it
		}
	case s.gen != t.gen:
		// Units given back or limits changed since the call left.
	case old != nil:
		*old = en
	default:
		if s.entries == nil {
			s.entries = make([]denyEntry, c.ways)
		}
		*s.victim() = en
	}
}

// denialOf returns the entry of the store's decision d of a request of
// cost n for key (of hash h) at at, and whether it is one to cache: a
// denial of one unit that some wait ends.
func denialOf(h uint64, key string, at int64, n int, d *storeDecision, rates []exactRate) (denyEntry, bool) {
	res := &d.res
	if n != 1 || res.Allowed || res.Err != nil || res.Remaining != 0 || res.RetryAfter == shardlimit.Never {
		return denyEntry{}, false
	}
	b := rateIndex(rates, res.Window)
	// Until the binding rate admits a unit, or its usage drops (a sliding
	// counter's oldest bucket leaves), the fields stay the denial's.
	wait := min(d.rates[b].retry, d.rates[b].reset)
	en := denyEntry{hash: h, key: key, from: at, until: at + wait.Microseconds(), retry: at + res.RetryAfter.Microseconds(),
		reset: at + res.ResetAfter.Microseconds(), limit: int32(res.Limit), rate: b}
	return en, en.until > at
}

// find returns key's entry, or nil. Requires s.mu held.
func (s *denyStripe) find(h uint64, key string) *denyEntry {
	for i := range s.entries {
		if en := &s.entries[i]; en.hash == h && en.key == key {
			return en
		}
	}
	return nil
}

// victim returns the entry to give a new key: the one that ends first (a
// free or expired one if any). Requires s.mu held and s.entries made.
func (s *denyStripe) victim() *denyEntry {
	v := &s.entries[0]
	for i := range s.entries {
		if s.entries[i].until < v.until {
			v = &s.entries[i]
		}
	}
	return v
}

// rateIndex returns the index of the rate of window w in rates.
func rateIndex(rates []exactRate, w time.Duration) uint8 {
	for i, r := range rates {
		if r.window == w {
			return uint8(i)
		}
	}
	return 0
}

// invalidate forgets key's denial, and makes every call in flight for a key
// of its stripe leave its denial uncached: call it before and after units
// of key are given back, and after its limits change.
func (c *denyCache) invalidate(key string) {
	if c.ways == 0 {
		return
	}
	h := xxh3.HashStringSeed(key, c.seed)
	s := &c.stripes[h&(denyStripes-1)]
	s.mu.Lock()
	s.gen++
	if en := s.find(h, key); en != nil {
		*en = denyEntry{}
	}
	s.mu.Unlock()
}

// invalidateAll forgets every denial, as invalidate does for each key.
func (c *denyCache) invalidateAll() {
	for i := range c.stripes {
		s := &c.stripes[i]
		s.mu.Lock()
		s.gen++
		clear(s.entries)
		s.mu.Unlock()
	}
}
