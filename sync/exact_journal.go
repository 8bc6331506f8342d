package sync

import (
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/shardlimit/shardlimit"
	"github.com/zeebo/xxh3"
)

// DefaultJournalKeys is the number of keys an Exact limiter's journal holds
// when ExactConfig.JournalKeys is zero.
const DefaultJournalKeys = 1 << 16

// journalShards is the number of lock stripes of a journal (a power of two).
const journalShards = 16

// journalSlots is the most entries one key keeps: a grant in a new cell
// when all are taken moves the oldest entry's units into the next one (a
// later instant: stricter, never fewer units).
const journalSlots = 4

// A journal is Exact's record of the units this process was granted that
// still matter, per key: those Redis granted and those its failure policy
// granted without Redis ("pending": the store lacks them). When the store
// answers again after an outage, after evictions, or after it restarted
// empty, Exact sends the pending units (or all of them, if the store may
// have lost state) with the charge script, so a recovered store never
// grants a window's limit on top of them.
//
// Entries are coalesced by cell, keeping the later instant (a unit moved
// later counts at least as long): one per window id of every rate (fixed
// window), per bucket id of every rate (sliding counter), per quarter of
// every rate's window (GCRA). An entry is dropped once its units no
// longer count: its window has ended, its bucket has left every window, or
// (GCRA) a whole window has passed since its latest instant, as a unit
// never holds a GCRA's theoretical arrival time more than W after it.
// GCRA's units are not drained per process: its bucket drains at L per W
// for all processes together, so each replays every unit of its last
// window, and the store's TAT comes back to what they all admitted in it.
// Safe for concurrent use.
type journal struct {
	shards  [journalShards]journalShard
	seed    uint64
	perMax  int // keys per shard
	alg     shardlimit.Algorithm
	cell    [shardlimit.MaxRates]int64 // each rate's cell: window, bucket or quarter window (GCRA), µs
	window  [shardlimit.MaxRates]int64 // each rate's window, µs
	rates   int
	buckets int64         // of the sliding counter: the buckets that count besides now's
	pending atomic.Bool   // some entry may hold pending units
	full    atomic.Uint64 // grants not journaled: the journal was full
}

type journalShard struct {
	mu    stdsync.Mutex
	m     map[string]*journalKey // nil until the shard's first key
	swept int64                  // of the last sweep, µs
	_     [40]byte
}

// journalKey holds one key's entries, oldest first, and the instants of
// its last grants (see stamp).
type journalKey struct {
	e      [journalSlots]journalEntry
	len    int
	stamps [journalStamps]stamp // a ring; next is the oldest
	next   int
	epoch  int64 // the store's reset marker of the key last seen (see lossOf)
	refund int64 // units refunded (Settle) since the entries began: off every expectation
	// forgot is the latest caller instant of a stamp the ring overwrote
	// (valid once forgotten): a decision given at it or before may be
	// one no stamp names any more.
	forgot    int64
	forgotten bool
}

// journalStamps is how many of a key's last grants the journal keeps the
// store's instant of (see Exact.Settle).
const journalStamps = 8

// stamp pairs the instant a caller gave a decision (Unix µs) with the
// instant the store decided it at.
type stamp struct {
	caller, store int64
	set           bool
}

// journalEntry is the units of one cell.
type journalEntry struct {
	at      int64 // the latest instant of its units, Unix µs
	n       int64 // units this process was granted in it
	pend    int64 // of which the store lacks, not being sent
	sending int64 // of which the store lacks, being sent by a replay
	moved   bool  // holds units merged from an older cell: their instants are not known
}

// newJournal returns the journal of a limiter of algorithm alg and the
// windows and buckets of rates, holding at most maxKeys keys.
func newJournal(alg shardlimit.Algorithm, rates []exactRate, buckets, maxKeys int) *journal {
	j := &journal{alg: alg, rates: len(rates), perMax: max(1, maxKeys/journalShards), seed: uint64(time.Now().UnixNano())}
	if alg == shardlimit.SlidingCounter {
		j.buckets = int64(buckets)
	}
	for i, r := range rates {
		w := r.window.Microseconds()
		j.window[i], j.cell[i] = w, w
		switch alg {
		case shardlimit.SlidingCounter:
			j.cell[i] = w / int64(buckets)
		case shardlimit.GCRA:
			j.cell[i] = max(1, w/4)
		}
	}
	return j // each shard's map is made by its first key (record)
}

func (j *journal) shard(key string) *journalShard {
	return &j.shards[xxh3.HashStringSeed(key, j.seed)&(journalShards-1)]
}

// record adds n > 0 units granted to key at at (Unix µs; one behind the
// key's latest entry is recorded at that entry's instant); pend says the
// store lacks them. It reports false, recording nothing, if key is new
// and the journal is full of keys whose units still count.
func (j *journal) record(key string, at int64, n int, pend bool) bool {
	return j.put(key, at, n, pend, -1)
}

// recordGrant adds n > 0 units the store granted key at at (Unix µs) in a
// reply that carried the reset marker epoch (see resetScript): a grant
// from before a Reset the journal has seen is not recorded (the Reset
// forgot it); one after a Reset it has not seen forgets the units the
// store had granted before it. It reports false as record does.
func (j *journal) recordGrant(key string, at int64, n int, epoch int64) bool {
	return j.put(key, at, n, false, epoch)
}

// put is record and recordGrant: epoch is the reply's reset marker, or -1
// for units the store has not seen.
func (j *journal) put(key string, at int64, n int, pend bool, epoch int64) bool {
	s := j.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.m[key]
	if k == nil {
		if len(s.m) >= j.perMax && !j.sweep(s, at) {
			j.full.Add(1)
			return false
		}
		k = &journalKey{epoch: max(0, epoch)}
		if s.m == nil {
			s.m = make(map[string]*journalKey)
		}
		s.m[key] = k
	}
	switch {
	case epoch < 0:
	case epoch < k.epoch:
		return true // granted before a Reset that forgot it
	case epoch > k.epoch:
		j.resetKey(k, epoch)
	}
	if k.len > 0 {
		// Per key, time never goes back, as in the core: a unit of an
		// instant behind the key's latest counts at the latest, as the
		// fallback decided it, never in a window that has ended.
		at = max(at, k.e[k.len-1].at)
	}
	p := int64(0)
	if pend {
		p = int64(n)
		j.pending.Store(true)
	}
	j.add(k, journalEntry{at: at, n: int64(n), pend: p})
	return true
}

// stamp records that the store decided a grant of key, given at the
// caller's instant caller, at its instant store (key's entry must exist:
// after record).
func (j *journal) stamp(key string, caller, store int64) {
	s := j.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.m[key]; k != nil {
		if old := k.stamps[k.next]; old.set && (!k.forgotten || old.caller > k.forgot) {
			k.forgot, k.forgotten = old.caller, true
		}
		k.stamps[k.next] = stamp{caller: caller, store: store, set: true}
		k.next = (k.next + 1) % journalStamps
	}
}

// storeInstant returns the store's instant of key's last grants given at
// the caller's instant caller: the latest of them, whether any is known,
// and whether they all fall in one cell of every rate (a refund of one
// of them then has one window, bucket or TAT to go to).
func (j *journal) storeInstant(key string, caller int64) (at int64, found, one bool) {
	s := j.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.m[key]
	if k == nil {
		return 0, false, false
	}
	one = true
	for _, st := range k.stamps {
		if !st.set || st.caller != caller {
			continue
		}
		if found && !j.sameCell(at, st.store) {
			one = false
		}
		if !found || st.store > at {
			at = st.store
		}
		found = true
	}
	// A forgotten grant given at caller (or before: instants need not
	// come in order) may lie in another cell: its refund cannot be placed.
	if k.forgotten && caller <= k.forgot {
		one = false
	}
	return at, found, found && one
}

// add puts x into k: coalesced into the newest entry if of its cell, else
// appended, the oldest merged into the next when all slots are taken.
func (j *journal) add(k *journalKey, x journalEntry) {
	if k.len > 0 {
		last := &k.e[k.len-1]
		if j.sameCell(last.at, x.at) {
			last.at = max(last.at, x.at)
			last.n += x.n
			last.pend += x.pend
			return
		}
	}
	if k.len == journalSlots {
		k.e[1].n += k.e[0].n
		k.e[1].pend += k.e[0].pend
		k.e[1].sending += k.e[0].sending
		k.e[1].moved = true
		copy(k.e[:], k.e[1:])
		k.len--
	}
	k.e[k.len] = x
	k.len++
}

// sameCell reports whether instants a and b fall in one cell of every
// rate.
func (j *journal) sameCell(a, b int64) bool {
	for i := range j.rates {
		if floorDiv(a, j.cell[i]) != floorDiv(b, j.cell[i]) {
			return false
		}
	}
	return true
}

// dead reports whether x's units no longer count at now (Unix µs) for any
// rate.
func (j *journal) dead(x *journalEntry, now int64) bool {
	for i := range j.rates {
		switch j.alg {
		case shardlimit.GCRA:
			if x.at+j.window[i] > now {
				return false
			}
		default:
			if floorDiv(x.at, j.cell[i]) >= floorDiv(now, j.cell[i])-j.buckets {
				return false
			}
		}
	}
	return true
}

// sweep drops the entries of s that no longer count at now and the keys
// left without any, at most once per 100 ms of now; it reports whether s
// has room for a new key. Requires s.mu held.
func (j *journal) sweep(s *journalShard, now int64) bool {
	if now-s.swept < 100_000 && now >= s.swept {
		return len(s.m) < j.perMax
	}
	s.swept = now
	j.sweepShard(s, now)
	return len(s.m) < j.perMax
}

// sweepShard drops the entries of s that no longer count at now and the
// keys left without any, and returns how many keys it dropped. Requires
// s.mu held.
func (j *journal) sweepShard(s *journalShard, now int64) int {
	dropped := 0
	for key, k := range s.m {
		j.prune(k, now)
		if k.len == 0 {
			delete(s.m, key)
			dropped++
		}
	}
	return dropped
}

// prune drops k's entries that no longer count at now, keeping their
// order; one still being sent stays.
func (j *journal) prune(k *journalKey, now int64) {
	w := 0
	for i := 0; i < k.len; i++ {
		if k.e[i].sending > 0 || !j.dead(&k.e[i], now) {
			k.e[w] = k.e[i]
			w++
		}
	}
	clear(k.e[w:k.len])
	k.len = w
}

// forget drops key's entries (Exact.Reset).
func (j *journal) forget(key string) {
	s := j.shard(key)
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// sweepAll drops, shard by shard, the entries that no longer count at now
// and the keys left without any, and returns how many keys it dropped.
func (j *journal) sweepAll(now int64) int {
	dropped := 0
	for i := range j.shards {
		s := &j.shards[i]
		s.mu.Lock()
		dropped += j.sweepShard(s, now)
		s.mu.Unlock()
	}
	return dropped
}

// keys returns the number of keys the journal holds.
func (j *journal) keys() int {
	n := 0
	for i := range j.shards {
		s := &j.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// charge is one charge of a replay: n units of key at at (Unix µs).
type charge struct {
	key string
	at  int64
	n   int64
}

// take appends to out the charges a replay at now sends (the pending
// units; all units if all) and marks the pending ones as being sent,
// dropping what no longer counts.
func (j *journal) take(out []charge, now int64, all bool) []charge {
	j.pending.Store(false)
	for i := range j.shards {
		s := &j.shards[i]
		s.mu.Lock()
		for key, k := range s.m {
			j.prune(k, now)
			if k.len == 0 {
				delete(s.m, key)
				continue
			}
			for x := range k.e[:k.len] {
				e := &k.e[x]
				n := e.pend
				if all {
					n = e.n - e.sending
				}
				e.sending += e.pend
				e.pend = 0
				if n > 0 {
					out = append(out, charge{key: key, at: e.at, n: n})
				}
			}
		}
		s.mu.Unlock()
	}
	return out
}

// settle ends a replay: the units it was sending are in the store (ok)
// or pending again.
func (j *journal) settle(ok bool) {
	for i := range j.shards {
		s := &j.shards[i]
		s.mu.Lock()
		for _, k := range s.m {
			for x := range k.e[:k.len] {
				e := &k.e[x]
				if !ok && e.sending > 0 {
					e.pend += e.sending
					j.pending.Store(true)
				}
				e.sending = 0
			}
		}
		s.mu.Unlock()
	}
}

// floorDiv returns floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
