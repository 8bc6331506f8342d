package sync

import (
	"slices"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/zeebo/xxh3"
)

// births is Exact's record of the key states it saw alive in the store:
// per key and rate, the birth of the state (the field b the decision
// scripts write when they create it, Redis TIME) and until when the state
// must live (the instant its reply's reset names, while it counts units:
// fixed window, the window's end; sliding counter, when its oldest
// counted bucket leaves the window; GCRA, the theoretical arrival time).
// A state's TTL runs at least a second past that, and every write keeps
// the birth. So a later reply, decided before that instant, that shows the
// rate's state with another birth or none proves the store lost the state
// (evicted, restarted empty, failed over before replicating it) whoever
// had units in it, unless a Reset came between (a reset marker above the
// one last seen).
//
// It holds at most as many keys as the journal (JournalKeys), only keys
// whose states still have to live; at the cap, a key it cannot hold is not
// remembered, and a loss of its state is proved only by the journal or
// found by the eviction check. Safe for concurrent use.
type births struct {
	shards [journalShards]birthShard
	seed   uint64
	perMax int // keys per shard
	rates  int // of the limiter
	// gen is bumped by clear and by every loss a reply proves (here, and
	// again by Exact.storeLoss once its policy decides; see crossed): the
	// replies of calls sent before are not compared.
	gen atomic.Uint64
}

type birthShard struct {
	mu    stdsync.Mutex
	m     map[string]birthKey // nil until the shard's first key
	swept int64               // of the last sweep, µs
	_     [40]byte
}

// birthKey is what a key's last reply showed.
type birthKey struct {
	born  [shardlimit.MaxRates]int64 // each rate's birth, 0 if none
	until [shardlimit.MaxRates]int64 // each rate's state must live before it (µs); 0: need not
	seen  int64                      // the instant the store decided the reply at (µs)
	epoch int64                      // the largest reset marker seen
}

// newBirths returns the births of a limiter of rates rates, holding at
// most maxKeys keys.
func newBirths(rates, maxKeys int) *births {
	return &births{rates: rates, perMax: max(1, maxKeys/journalShards), seed: uint64(time.Now().UnixNano())}
}

func (b *births) shard(key string) *birthShard {
	return &b.shards[xxh3.HashStringSeed(key, b.seed)&(journalShards-1)]
}

// lives returns until when reply d shows that rate k's state must live
// (Unix µs; 0: need not), for a decision of n units under limit lim:
// while the state counts units, before the decision or written by it.
func lives(d *storeDecision, k, lim, n int, consume bool) int64 {
	o := &d.rates[k]
	used := lim - o.remaining
	wrote := consume && d.res.Allowed && n > 0
	if d.res.Allowed {
		used -= n
	}
	if d.born[k] == 0 || used <= 0 && !wrote {
		return 0
	}
	return d.at + o.reset.Microseconds()
}

// check compares the reply d to a decision of n units of key under lims,
// sent when b's generation was gen, with what b last saw of key, and
// records it. It reports whether d proves the store lost a state of key
// that had to live on (see births). A reply decided before the one last
// seen (replies of one process may cross), or of a call sent before the
// generation changed, is not compared.
func (b *births) check(key string, gen uint64, d *storeDecision, lims *limitSet, n int, consume bool) (lost bool) {
	s := b.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.crossed(gen) {
		return false
	}
	old, ok := s.m[key]
	if ok && d.at < old.seen {
		return false
	}
	next := birthKey{seen: d.at, epoch: max(d.epoch, old.epoch)}
	keep := false
	for k := range b.rates {
		next.born[k], next.until[k] = d.born[k], lives(d, k, lims[k], n, consume)
		if old.born[k] != 0 && d.born[k] != old.born[k] && d.at < old.until[k] && d.epoch <= old.epoch {
			lost = true
		}
		if d.born[k] != 0 && d.born[k] == old.born[k] {
			next.until[k] = max(next.until[k], old.until[k])
		}
		keep = keep || next.until[k] > d.at
	}
	switch {
	case keep && (ok || b.room(s, d.at)):
		s.m[key] = next
	case ok && !keep:
		delete(s.m, key)
	}
	if lost {
		// Under s.mu: a reply of the key checked after this one, from
		// a call sent before, crosses the proof (it would find the new
		// birth recorded, and prove nothing).
		b.gen.Add(1)
	}
	return lost
}

// room reports whether s can take a new key, after dropping the keys
// whose states need not live at now (Unix µs) any more, at most once per
// 100 ms of now. Requires s.mu held.
func (b *births) room(s *birthShard, now int64) bool {
	if s.m == nil {
		s.m = make(map[string]birthKey)
	}
	if len(s.m) < b.perMax || now-s.swept < 100_000 && now >= s.swept {
		return len(s.m) < b.perMax
	}
	s.swept = now
	for key, r := range s.m {
		if slices.Max(r.until[:]) <= now {
			delete(s.m, key)
		}
	}
	return len(s.m) < b.perMax
}

// crossed reports whether a call sent when b's generation was gen
// crossed a loss proved since, or a clear: the store that decided it may
// have lost state the process has not replayed yet, so the policy decides
// it (see Exact.decide).
func (b *births) crossed(gen uint64) bool {
	return b.gen.Load() != gen
}

// forget drops what b saw of key (Exact.Reset).
func (b *births) forget(key string) {
	s := b.shard(key)
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// clear drops everything b saw, and makes it ignore the replies of calls
// sent before: the store may have lost any state (a replay of the whole
// journal follows), so the states it holds after are new, not losses.
func (b *births) clear() {
	b.gen.Add(1)
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		s.m = nil
		s.mu.Unlock()
	}
}
