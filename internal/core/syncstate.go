package core

import "sync/atomic"

// Sync state: what a limiter built by NewSynced (for package sync) keeps per key to share
// its counts with other nodes through a store, in the key's side words after
// the algorithm's own:
//
//	[off]             flags (syncTouched: a decision since the last Collect)
//	then, per rate k (longest window first), from o_0 = off+1:
//	[o_k, o_k+1]      id of the newest bucket rate k's arrays describe (int64)
//	[o_k+2, ...]      delta[m_k], sent[m_k], remote[m_k]
//	                  (o_{k+1} = o_k + 2 + 3*m_k)
//
// Bucket id b of rate k holds the units of [b*G_k, (b+1)*G_k); the arrays
// are rings indexed b mod m_k and cover the m_k newest buckets: for a fixed
// window m_k = 1 and G_k = W_k, for the sliding counter and log m_k = n+1
// and G_k = W_k/n. delta is what this node admitted and has not sent, sent
// what it sent in total, remote the other nodes' units as last read from
// the store. Every admitted unit counts in every rate's delta, so each rate
// shares its own units with its own bound. One flags word serves all rates:
// a key is collected with all of them.
//
// The algorithms do not know this layout: a shard of a shared limiter
// offers them the sync state through its peerLayer (shard.peers, nil
// unless shared), which answers per rate what they need to decide (the
// other nodes' units in a window or a bucket, their estimate at an
// instant), records and takes back the units they admit, moves the rings
// with the key's time and counts the unsent units dropped, and says
// whether the key still holds anything the janitor must keep. The table
// (synctable.go, and eviction, growth and Reset) handles the rest: the
// flags word, the dirty list, Collect and what the reconciler applies.

const syncTouched = 1

// syncSet is the sync state's layout: the flags word and one syncLayout
// per rate.
type syncSet struct {
	flags int // side word of the flags
	rates int
	rate  [MaxRates]syncLayout // per rate, longest window first

	// pending is set when a key is queued for Collect (see TakePending)
	pending atomic.Bool
	// hook, if set, is called when a key is queued (see SetQueueHook)
	hook func()
}

// newSyncSet lays out the sync state of alg's rates rs from side word off,
// with n buckets per window for the sliding counter and log.
func newSyncSet(off int, alg Algorithm, rs *rateSet, n int64) *syncSet {
	y := &syncSet{flags: off, rates: rs.n}
	o := off + 1
	for k := range rs.n {
		l := syncLayout{off: o, m: int(n) + 1, bucket: rs.window[k] / n}
		if alg == FixedWindow {
			l.m, l.bucket = 1, rs.window[k]
		}
		y.rate[k] = l
		o += l.words()
	}
	return y
}

// words returns the side words of the sync state.
func (y *syncSet) words() int {
	w := 1
	for k := range y.rates {
		w += y.rate[k].words()
	}
	return w
}

// holds reports whether the sync words of any rate still matter at key
// time t (see syncLayout.holds).
func (y *syncSet) holds(side []uint32, t int64) bool {
	for k := range y.rates {
		if y.rate[k].holds(side, t) {
			return true
		}
	}
	return false
}

// unsent returns the units of every rate not yet sent.
func (y *syncSet) unsent(side []uint32) uint64 {
	var sum uint64
	for k := range y.rates {
		delta := y.rate[k].deltas(side)
		for _, d := range delta {
			sum += uint64(d)
		}
	}
	return sum
}

// touched reports whether the key whose side words are side had a
// decision since the last Collect.
func (y *syncSet) touched(side []uint32) bool { return side[y.flags]&syncTouched != 0 }

// forget clears the sync state of the key whose side words are side and
// returns the units it had not sent.
func (y *syncSet) forget(side []uint32) uint64 {
	u := y.unsent(side)
	clear(side[y.flags:])
	return u
}

// syncLayout is one rate's sync state: its head and rings.
type syncLayout struct {
	off    int   // first side word of the rate's state (its head)
	m      int   // buckets kept
	bucket int64 // G, ns
}

func (y *syncLayout) words() int { return 2 + 3*y.m }

func (y *syncLayout) idx(id int64) int {
	i := id % int64(y.m)
	if i < 0 {
		i += int64(y.m)
	}
	return int(i)
}

func (y *syncLayout) head(side []uint32) int64 {
	return int64(uint64(side[y.off]) | uint64(side[y.off+1])<<32)
}

func (y *syncLayout) setHead(side []uint32, id int64) {
	side[y.off], side[y.off+1] = uint32(id), uint32(uint64(id)>>32)
}

// deltas returns the ring of units admitted here and not sent: the first
// of arrays, alone.
func (y *syncLayout) deltas(side []uint32) []uint32 {
	a := y.off + 2
	return side[a : a+y.m : a+y.m]
}

// remotes returns the ring of the other nodes' units: the last of arrays,
// alone.
func (y *syncLayout) remotes(side []uint32) []uint32 {
	a := y.off + 2 + 2*y.m
	return side[a : a+y.m : a+y.m]
}

func (y *syncLayout) arrays(side []uint32) (delta, sent, remote []uint32) {
	a := y.off + 2
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
	remote := y.remotes(side)
	return remote[i]
}

// estimate returns the other nodes' units in the window ending at key time
// t (over the remote ring): the m-1 newest buckets in full and
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
	delta := y.deltas(side)
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

// add records n units admitted locally in the newest bucket.
func (y *syncLayout) add(side []uint32, n uint32) {
	delta := y.deltas(side)
	delta[y.idx(y.head(side))] += n
}

// takeBack takes back the n units the decision just made added to the
// newest bucket (see refund).
func (y *syncLayout) takeBack(side []uint32, n uint32) {
	delta := y.deltas(side)
	delta[y.idx(y.head(side))] -= n
}

// split returns the other nodes' units in the rings' oldest bucket and in
// the others.
func (y *syncLayout) split(side []uint32) (oldest, rest int64) {
	remote := y.remotes(side)
	i := y.idx(y.head(side) + 1) // the oldest bucket, head-(m-1)
	for _, v := range remote {
		rest += int64(v)
	}
	oldest = int64(remote[i])
	return oldest, rest - oldest
}

// oldest returns the id of the oldest of the rings' buckets before the
// newest that holds other nodes' units, or the newest's if none does.
func (y *syncLayout) oldest(side []uint32) int64 {
	remote := y.remotes(side)
	h := y.head(side)
	i := y.idx(h + 1) // bucket h-m+1
	for id := h - int64(y.m) + 1; id < h; id++ {
		if remote[i] != 0 {
			return id
		}
		if i++; i == y.m {
			i = 0
		}
	}
	return h
}

// peerLayer is the seam through which a shard offers every algorithm
// the state a shared key keeps in its side words (laid out by set): what
// the other nodes admitted, what this node admitted and has not sent, per
// rate. The algorithms ask it questions about one rate k of a key whose
// side words are side; it keeps the rings' layout, their rotation and the
// count of unsent units dropped to itself. A shard of a limiter that is
// not shared has none (nil). Every method requires the shard's mutex held.
type peerLayer struct {
	set     *syncSet
	scratch []uint32       // the shard's scratch side words (a peek's copy)
	dropped *atomic.Uint64 // the shard's unsent units dropped
}

// start sets the newest bucket of rate k of a fresh key, whose layer words
// are zero, to the one holding instant t.
func (p *peerLayer) start(side []uint32, k int, t int64) {
	y := &p.set.rate[k]
	y.setHead(side, floorDiv(t, y.bucket))
}

// move brings rate k to the bucket holding instant t (never back): the
// buckets that leave are cleared, and their unsent units counted dropped
// (Shared reports them) unless side is the scratch copy a peek decides
// on: the stored key drops them again when it moves. Every decision on
// the stored key counts them, the first pass of a key of several rates
// included, which consumes nothing but moves the rings for good.
func (p *peerLayer) move(side []uint32, k int, t int64) {
	y := &p.set.rate[k]
	if d := y.rotate(side, y.bucketOf(side, t)); d != 0 {
		p.drop(side, d)
	}
}

// at moves rate k to instant t, the key's latest, as move does, and
// returns units(side, k, t).
func (p *peerLayer) at(side []uint32, k int, t int64) int64 {
	y := &p.set.rate[k]
	j := y.bucketOf(side, t)
	if d := y.rotate(side, j); d != 0 {
		p.drop(side, d)
	}
	if y.m == 1 {
		return int64(y.remote(side, j))
	}
	return y.estimate(side, t)
}

// drop counts d unsent units dropped from side (see move).
func (p *peerLayer) drop(side []uint32, d uint32) {
	if &side[0] != &p.scratch[0] {
		p.dropped.Add(uint64(d))
	}
}

// units returns the other nodes' units that count in rate k's window at
// instant t, not before the key's newest bucket: for a fixed window those
// of t's window, for the sliding algorithms their weighted estimate (see
// syncLayout.estimate).
func (p *peerLayer) units(side []uint32, k int, t int64) int64 {
	y := &p.set.rate[k]
	if y.m == 1 {
		return int64(y.remote(side, y.bucketOf(side, t)))
	}
	return y.estimate(side, t)
}

// window returns the other nodes' units in rate k's n+1 newest buckets
// (those of a sliding counter's window at an instant of the newest):
// those of the oldest, which straddles the window's start, and those of
// the n others.
func (p *peerLayer) window(side []uint32, k int) (straddler, whole int64) {
	return p.set.rate[k].split(side)
}

// bucket returns the other nodes' units in rate k's bucket id, 0 if the
// key no longer (or not yet) keeps it.
func (p *peerLayer) bucket(side []uint32, k int, id int64) int64 {
	return int64(p.set.rate[k].remote(side, id))
}

// oldest returns the id of the oldest of rate k's n+1 newest buckets
// before the newest that holds other nodes' units, or the newest's if
// none does.
func (p *peerLayer) oldest(side []uint32, k int) int64 { return p.set.rate[k].oldest(side) }

// size returns the length of rate k's buckets, ns.
func (p *peerLayer) size(k int) int64 { return p.set.rate[k].bucket }

// add records n units admitted in rate k's newest bucket.
func (p *peerLayer) add(side []uint32, k int, n uint32) { p.set.rate[k].add(side, n) }

// takeBack takes back the n units rate k's decision just made added (see
// algorithm.refund).
func (p *peerLayer) takeBack(side []uint32, k int, n uint32) { p.set.rate[k].takeBack(side, n) }

// holds reports whether the layer still holds anything for the key at t
// (see syncSet.holds): such a key is not idle.
func (p *peerLayer) holds(side []uint32, t int64) bool { return p.set.holds(side, t) }

// markTouched queues slot for the next Collect. Requires s.mu held.
func markTouched[E any](s *shard[E], y *syncSet, slot uint32, side []uint32) {
	if side[y.flags]&syncTouched == 0 {
		side[y.flags] |= syncTouched
		s.dirty = append(s.dirty, slot)
		if !y.pending.Load() {
			y.pending.Store(true)
		}
		if y.hook != nil {
			y.hook()
		}
	}
}
