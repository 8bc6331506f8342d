package sync

import (
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit"
)

// journalView is a copy of one key's journal, taken before a decision's
// call is sent: the units this process knew were in the store for the key
// when the call left (granted by replies received before it, or replayed).
// Its reply is compared with the view, not with the journal at reply
// time, so a grant whose reply came back while the call was under way
// (the store may have decided it after this call) is never expected in it.
type journalView struct {
	e      [journalSlots]journalEntry
	len    int
	epoch  int64
	refund int64
}

// view returns key's journal as it is now; ok is false if it holds no
// units of key.
func (j *journal) view(key string) (v journalView, ok bool) {
	s := j.shard(key)
	s.mu.Lock()
	if k := s.m[key]; k != nil && k.len > 0 {
		v = journalView{e: k.e, len: k.len, epoch: k.epoch, refund: k.refund}
		ok = true
	}
	s.mu.Unlock()
	return v, ok
}

// observe records the reset marker epoch of key read in a reply (see
// resetScript): a marker above the journal's means a Reset (by any
// process) forgot the key's usage in the store, so the journal forgets
// the units it held of key too.
func (j *journal) observe(key string, epoch int64) {
	s := j.shard(key)
	s.mu.Lock()
	if k := s.m[key]; k != nil && epoch > k.epoch {
		j.resetKey(k, epoch)
	}
	s.mu.Unlock()
}

// resetKey drops from k the units the store had, as a Reset marked epoch
// did; units the store lacks (pending or being sent) stay, to be sent (the
// strict side: they may be older than the Reset). Requires the shard's mu
// held.
func (j *journal) resetKey(k *journalKey, epoch int64) {
	w := 0
	for i := range k.e[:k.len] {
		x := k.e[i]
		x.n = x.pend + x.sending
		if x.n > 0 {
			k.e[w] = x
			w++
		}
	}
	clear(k.e[w:k.len])
	k.len, k.refund, k.epoch = w, 0, epoch
}

// refunded records that n > 0 units of key are being refunded to the
// store (Settle): no reply is expected to count them any more. It is
// recorded before the refund is sent, so a reply that crosses it is
// never taken for a loss.
func (j *journal) refunded(key string, n int) {
	s := j.shard(key)
	s.mu.Lock()
	if k := s.m[key]; k != nil {
		k.refund += int64(n)
	}
	s.mu.Unlock()
}

// expect returns the units of rate i that v proves the store holds at now
// (Unix µs) under limit lim, if the store lost nothing: units the store
// granted or took from a replay (not pending nor being sent), in entries
// whose cell is known (not merged from an older one), minus refunds. Fixed
// window: those of now's window (or a later one). Sliding counter: those
// of the buckets that count in full at now (the store's estimate is at
// least their sum). GCRA: for every cell start s of an entry, the units
// granted at s or later drive the theoretical arrival time to at least s
// + units*W/l, so at least units - (now - s)*l/W still count; the most of
// these.
func (j *journal) expect(v *journalView, i int, now int64, lim int) float64 {
	cell := j.cell[i]
	best := 0.0
	for x := range v.e[:v.len] {
		from := floorDiv(v.e[x].at, cell)
		units := int64(0)
		for y := range v.e[:v.len] {
			en := &v.e[y]
			own := en.n - en.pend - en.sending
			if en.moved || own <= 0 {
				continue
			}
			switch c := floorDiv(en.at, cell); j.alg {
			case shardlimit.GCRA:
				if c >= from {
					units += own
				}
			case shardlimit.SlidingCounter:
				if c > floorDiv(now, cell)-j.buckets {
					units += own
				}
			default:
				if c >= floorDiv(now, cell) {
					units += own
				}
			}
		}
		u := float64(units)
		if j.alg == shardlimit.GCRA {
			// The charge script caps the TAT at 4W ahead: an overdraft of
			// more than that is not expected whole (3W: clock skew).
			u = min(u, float64(3*lim)) - float64(now-from*cell)*float64(lim)/float64(j.window[i])
		}
		best = max(best, u)
	}
	return best - float64(v.refund)
}

// lossOf returns how many units of key the store lost, by the reply d to
// a decision of n units under lims whose call left when key's journal was
// v: the most, over the rates, by which the units the reply counts before
// the decision fall short of those v proves the store holds (see expect);
// 0 if none does. A rate counts for a reply only while its count is known:
// it admitted the units or has room left (a rate over its limit reports
// no room whatever it counts). A reply whose reset marker is above v's
// follows a Reset: not a loss. GCRA's counts are read from its remaining,
// rounded: a shortfall of more than one unit proves a loss.
func (e *Exact) lossOf(v *journalView, d *storeDecision, n int, lims *limitSet) int64 {
	if d.epoch > v.epoch {
		return 0
	}
	slack := 0.0
	if e.cfg.Algorithm == shardlimit.GCRA {
		slack = 1
	}
	lost := int64(0)
	for k := range e.rates {
		o := d.rates[k]
		if o.remaining == 0 && !d.res.Allowed {
			continue
		}
		used := int64(lims[k] - o.remaining)
		if d.res.Allowed {
			used -= int64(n)
		}
		if want := e.journal.expect(v, k, d.at, lims[k]); float64(used)+slack < want {
			lost = max(lost, int64(want-slack)-used)
		}
	}
	return lost
}

// storeLoss records that a reply proved the store lost state: units of
// this process (see lossOf), or none it knew of (units 0: a state it had
// seen alive was born again, see births). That is proof of what the
// eviction check only suspects: e becomes Degraded with an error
// wrapping ErrEvicting at once, decides by its policy for two
// EvictionChecks (of
// DefaultEvictionCheck if eviction is not watched) after the last such
// reply, the longest the eviction check takes to see evictions that go
// on (it compares two), so a store that keeps losing state is not asked
// again meanwhile; it then sends the store every unit of its journal
// before the store decides again (see the package doc on outages).
func (e *Exact) storeLoss(units int64) {
	e.lostUnits.Add(uint64(units))
	e.losses.Add(1)
	hold := e.evictEvery
	if hold <= 0 {
		hold = DefaultEvictionCheck
	}
	hold *= 2
	e.hmu.Lock()
	e.lossUntil = time.Now().Add(hold)
	if e.lossErr == nil { // else held already: the first loss of the hold is its cause
		e.lossErr = fmt.Errorf("%w: a reply counted %d fewer units of a key than this process had in the store (it lost them)", ErrEvicting, units)
		if units == 0 {
			e.lossErr = fmt.Errorf("%w: a reply showed a key's state born again before it could expire (the store lost it)", ErrEvicting)
		}
		e.replaying, e.lost = true, true
		e.replayAt = time.Time{}
		e.settle(e.lossErr)
	}
	e.hmu.Unlock()
	// After bypass is set: a call that read the generation after this
	// reads bypass too, and the calls in flight, sent before, cross it:
	// the policy decides them all (see births.crossed).
	e.births.gen.Add(1)
	e.hub.activateExact(e)
	e.hub.poke()
}

// stepLoss ends the hold of a loss (see storeLoss) that is over at now,
// and returns when it ends otherwise (zero: none); the replay of the
// journal follows. Requires e.hmu held.
func (e *Exact) stepLoss(now time.Time) time.Time {
	if e.lossErr == nil {
		return time.Time{}
	}
	if now.Before(e.lossUntil) {
		return e.lossUntil
	}
	e.lossErr = nil
	e.settle(nil)
	return time.Time{}
}
