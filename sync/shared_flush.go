package sync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/shardlimit/shardlimit/internal/core"
)

// zeroDelta is the Deltas of a Restore that only queues a key again.
var zeroDelta = [1]uint32{0}

// errNothingSent is flush's answer when no key had a decision.
var errNothingSent = errors.New("nothing to send")

// newNodeID returns a random Item.Node for a new Shared limiter: 16 hex
// digits, so two limiters' ids collide with odds of 2^-64 per pair.
func newNodeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24: it panics instead)
	return hex.EncodeToString(b[:])
}

// storeOffset reads the store's clock through b and returns its offset
// to ours, in nanoseconds.
func storeOffset(ctx context.Context, b Backend) (int64, error) {
	before := time.Now()
	st, err := b.Time(ctx)
	if err != nil {
		return 0, err
	}
	after := time.Now()
	return int64(st.Sub(before.Add(after.Sub(before) / 2))), nil
}

// flush sends every pending key once. The final flush (Shutdown's) counts
// the units it provably did not send as dropped: nothing will retry them.
func (s *Shared) flush(ctx context.Context, final bool) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	start := time.Now()
	now := s.clock.Now().UnixNano()
	if !s.collect(now) {
		return errNothingSent
	}
	s.sendOwn(ctx)
	return s.settleAll(start, now, final)
}

// collect gathers the pending keys into s.items (and s.owners), with
// room for their results in s.results, and reports whether there is
// anything to send. Requires s.flushMu held.
func (s *Shared) collect(now int64) bool {
	s.touchNear(now)
	s.tab.TakePending() // everything queued until now is collected below
	s.flushes = s.flushes[:0]
	for i := range s.tab.Shards() {
		s.flushes = s.tab.Collect(i, s.flushes)
	}
	s.items, s.owners = s.items[:0], s.owners[:0]
	s.seq++ // a write sent twice (go-redis retries) counts once
	for fi := range s.flushes {
		s.appendItems(fi, now)
	}
	clear(s.healing)
	s.lastKeys.Store(int64(len(s.flushes)))
	s.results = sizeResults(s.results, len(s.items))
	return len(s.items) > 0
}

// sendOwn sends s.items through the limiter's Backend, in pipelines of at
// most MaxBatch. Requires s.flushMu held.
func (s *Shared) sendOwn(ctx context.Context) {
	for lo := 0; lo < len(s.items); lo += s.maxBatch {
		s.addBatch(ctx, lo, min(lo+s.maxBatch, len(s.items)))
	}
}

// settleAll applies the results of a flush started at start, at now
// (Unix nanoseconds), and records its health. Requires s.flushMu held.
func (s *Shared) settleAll(start time.Time, now int64, final bool) error {
	applied := 0
	var firstErr error
	for i := range s.items {
		if s.settle(&s.results[i], i, now, final) {
			applied++
		} else {
			firstErr = cmpErr(firstErr, s.results[i].Err)
		}
	}
	s.hasNear.Store(len(s.near) > 0)
	return s.endFlush(start, applied, firstErr)
}

// touchNear queues the keys near their limit at the last flush, to be
// read at this one, decided or not, in the bucket of now.
func (s *Shared) touchNear(now int64) {
	s.lastNear.Store(int64(len(s.near)))
	for _, key := range s.near {
		s.tab.Touch(key, now)
	}
	clear(s.near)
	s.near = s.near[:0]
	s.hasNear.Store(false)
}

// appendItems appends to s.items (and s.owners) the items of flush fi:
// one per bucket with units to send, and its newest bucket always. Units
// of buckets that ended before now are dropped.
func (s *Shared) appendItems(fi int, now int64) {
	f := &s.flushes[fi]
	rate := &s.rates[f.Rate]
	m, size := rate.Count, rate.Size
	var window time.Duration // names the rate's counters if there are several
	if len(s.rates) > 1 {
		window = time.Duration(rate.Window)
	}
	heal := s.healing[f.Key]
	for k := range m {
		id := f.Newest - int64(m-1-k)
		newest := k == m-1
		if f.Deltas[k] == 0 && !newest && (!heal || f.Sent[k] == 0) {
			continue
		}
		// Bucket id counts until (id+m)*size; keep it one bucket and a
		// second longer for nodes whose clocks lag.
		end := (id + int64(m)) * size
		if end <= now {
			s.dropped.Add(uint64(f.Deltas[k]))
			if f.Deltas[k] != 0 {
				// Collect counted them sent: take them out of the
				// floor, or a later flush of the bucket (the clock
				// came back) would write what was counted dropped.
				s.tab.Forget(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: id, Deltas: []uint32{f.Deltas[k]}})
			}
			continue
		}
		span := 0
		if newest {
			span = m - 1
		}
		s.items = append(s.items, Item{
			Key: f.Key, Window: window, ID: id, Delta: f.Deltas[k], Node: s.node, Floor: int64(f.Sent[k]), Seq: s.seq,
			TTL:  time.Duration(end-now+size) + time.Second,
			Span: span,
		})
		s.owners = append(s.owners, owner{fi, k})
	}
}

// addBatch sends items lo to hi in one pipeline, leaving their results
// in s.results[lo:hi].
func (s *Shared) addBatch(ctx context.Context, lo, hi int) {
	out := s.backend.Add(ctx, s.items[lo:hi], s.results[lo:hi:hi])
	switch {
	case len(out) != hi-lo:
		// A Backend breaking its contract: which result is whose is
		// unknown, so nothing is proven applied.
		err := fmt.Errorf("%w: backend returned %d results for %d items", ErrBadReply, len(out), hi-lo)
		for i := lo; i < hi; i++ {
			s.results[i] = ItemResult{Outcome: MaybeApplied, Err: err}
		}
	case hi > lo && &out[0] != &s.results[lo]:
		copy(s.results[lo:hi], out) // a Backend that did not write in place
	}
}

// settle applies the result res of item i to the local limiter and the
// counters, and reports whether the item was applied (if not, res.Err
// says why).
func (s *Shared) settle(res *ItemResult, i int, now int64, final bool) bool {
	it := &s.items[i]
	f := &s.flushes[s.owners[i].flush]
	switch res.Outcome {
	case Applied:
		s.sentUnits.Add(uint64(it.Delta))
		var lost int64
		if it.Span > 0 || s.rates[f.Rate].Count == 1 {
			lost = s.tab.Apply(f, res.Totals)
			s.readAgain(f, res.Totals, now, final)
		} else {
			lost = s.tab.Apply(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: it.ID}, []int64{res.Total})
		}
		if lost > 0 {
			s.lose(lost)
		}
		return true
	case NotApplied:
		s.itemErrs.Add(1)
		if final {
			s.dropped.Add(uint64(it.Delta))
			return false
		}
		if it.Delta > 0 {
			s.retried.Add(uint64(it.Delta))
			s.tab.Restore(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: it.ID, Deltas: []uint32{it.Delta}})
		} else {
			// A read or a heal (floor only) that did not run: the
			// key is collected again, or a counter an earlier lost
			// reply left short would never be healed.
			s.tab.Restore(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: it.ID, Deltas: zeroDelta[:]})
		}
	default:
		s.itemErrs.Add(1)
		if errors.Is(res.Err, ErrBadReply) {
			s.badReplies.Add(1)
		}
		s.unknown.Add(uint64(it.Delta))
		// The store may or may not have these units. Sending them
		// again could count them twice; instead the key is
		// collected again with nothing to add, so the next flush's
		// floor (all this node sent for its newest bucket) heals
		// the counter if they were lost, even if the key sees no
		// further traffic.
		s.tab.Restore(&core.Flush{Key: f.Key, Rate: f.Rate, Newest: it.ID, Deltas: zeroDelta[:]})
	}
	return false
}

// endFlush counts a flush that sent items, applied of them, started at
// start, firstErr the first item's error (nil: none), and records the
// health: the flush failed if no item was applied.
func (s *Shared) endFlush(start time.Time, applied int, firstErr error) error {
	s.flushCount.Add(1)
	s.itemCount.Add(uint64(len(s.items)))
	d := time.Since(start)
	s.lastLatency.Store(int64(d))
	if int64(d) > s.maxLatency.Load() {
		s.maxLatency.Store(int64(d))
	}
	var err error
	if firstErr != nil {
		err = storeError(firstErr)
		s.lastErr.set(err)
	}
	if applied > 0 {
		s.record(nil)
		return nil
	}
	s.failedFlushes.Add(1)
	err = fmt.Errorf("%w (no item of %d applied)", err, len(s.items))
	s.record(err)
	return err
}

// lostBucket reports whether the store's totals of f's buckets (as f.Sent,
// oldest first) hold less than this node sent for one of them: the store
// lost that bucket's counter (restarted empty, evicted it), and only the
// newest bucket's item heals by itself.
func lostBucket(f *core.Flush, totals []int64) bool {
	if len(totals) != len(f.Sent) {
		return false
	}
	for i, total := range totals {
		if total < int64(f.Sent[i]) {
			return true
		}
	}
	return false
}

// readAgain queues key f, whose buckets' cluster totals are totals, for the
// next flush if it is near its limit or the store lost one of its older
// buckets; the next flush then sends every bucket this node sent units of,
// so each heals its share (Item.Floor). Requires s.flushMu held.
func (s *Shared) readAgain(f *core.Flush, totals []int64, now int64, final bool) {
	lost := lostBucket(f, totals)
	if lost {
		if s.healing == nil {
			s.healing = make(map[string]bool)
		}
		s.healing[f.Key] = true
	}
	if !final && (lost || s.nearLimit(f, totals, now)) &&
		(len(s.near) == 0 || s.near[len(s.near)-1] != f.Key) { // one key's rates are together
		s.near = append(s.near, f.Key)
	}
}

// nearLimit reports whether key f, whose buckets' cluster totals of rate
// f.Rate are totals (as f.Sent, oldest first), is near that rate's limit:
// the other nodes admitted units of it and the rate's room left is at most
// what they admit, at their pace so far, in twice the time this node takes
// to admit one, plus one. Such a key is read at every flush (Touch queues
// it, with all its rates), so a node that decides it seldom never decides
// it on a view older than two flushes: without that its view is as old as
// its last decision.
func (s *Shared) nearLimit(f *core.Flush, totals []int64, now int64) bool {
	if len(totals) != len(f.Sent) {
		return false
	}
	var local, remote int64
	for i, total := range totals {
		local += int64(f.Sent[i])
		remote += max(0, total-int64(f.Sent[i]))
	}
	if local == 0 || remote == 0 {
		return false
	}
	rem, ok := s.tab.Remaining(f.Key, now, f.Rate)
	return ok && int64(rem) <= (2*remote+local-1)/local+1
}

func cmpErr(first, err error) error {
	if first == nil {
		return err
	}
	return first
}
