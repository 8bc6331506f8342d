package sync

import (
	"context"
	"slices"
	"time"
)

// offsetEvery is how often a hub measures its store's clock offset while
// flushes succeed.
const offsetEvery = 10 * time.Second

// runShared flushes the Shared limiters whose flush is due and measures
// their failure share. The limiters of one FlushInterval share a tick,
// one FlushInterval after the end of the tick before, as one limiter's
// own timer would be: at each tick every one of them with something to
// send whose own schedule (its back-off while the store fails) has come
// flushes, all in the same pipelines. Only the limiters with work are
// visited (see activate); the others flush nothing at the tick.
func (h *hub) runShared(ctx context.Context, now time.Time, next *time.Time) {
	h.setTicks(now)
	due := h.tmp[:0]
	nowNs := now.UnixNano()
	for s := range h.hotS {
		if s.left.Load() {
			delete(h.hotS, s)
			continue
		}
		h.log.visit(s)
		if nowNs >= s.share.end.Load() || s.lossy.Load() {
			s.flushMu.Lock()
			s.stepShare(now)
			if until := s.stepLoss(now); !until.IsZero() {
				*next = minTime(*next, until)
			}
			s.flushMu.Unlock()
		}
		*next = minTime(*next, s.share.due())
		if t := h.ticks[s.interval]; t != nil && t.due && !now.Before(s.next) {
			due = append(due, s)
		}
	}
	h.tmp = due
	if len(due) > 0 {
		h.flushShared(ctx, due)
		for _, s := range due {
			if s.cool() {
				delete(h.hotS, s)
			}
		}
		clear(due)
	}
	for s := range h.hotS {
		if t := h.ticks[s.interval]; t != nil {
			t.used = true
		}
	}
	end := time.Now()
	for iv, t := range h.ticks {
		if t.due {
			t.prev, t.next, t.due = now, end.Add(iv), false
		}
	}
	h.idleTicks(next)
}

// idleTicks stops the ticks that no limiter with work uses, and adds the
// next beat of the others to next. A limiter activated since the round
// took the active ones (see takeActive) keeps every tick going, so the
// next beat of its own takes it and flushes it. Activation and stopping
// agree under h.actMu: a limiter that activates after a tick stopped
// finds it in h.idleIv and wakes the hub.
func (h *hub) idleTicks(next *time.Time) {
	h.actMu.Lock()
	pending := len(h.actS) > 0
	for iv, t := range h.ticks {
		used := t.used || pending
		t.used, t.stopped = false, !used
		if used {
			delete(h.idleIv, iv)
			*next = minTime(*next, t.next)
		} else {
			h.idleIv[iv] = true
		}
	}
	for iv := range h.idleIv {
		if h.ticks[iv] == nil {
			delete(h.idleIv, iv) // no limiter of that interval left
		}
	}
	h.actMu.Unlock()
}

// setTicks brings the ticks up to the FlushIntervals in use (h.ivs) and
// marks those due at now.
func (h *hub) setTicks(now time.Time) {
	for _, iv := range h.ivs {
		if h.ticks[iv] == nil {
			h.ticks[iv] = &tick{next: now.Add(iv)}
		}
	}
	for iv, t := range h.ticks {
		if !slices.Contains(h.ivs, iv) {
			delete(h.ticks, iv)
			continue
		}
		if t.stopped {
			// Restarted: its first beat a FlushInterval from now, as a
			// new tick's; the limiters of its interval had nothing to
			// flush until now.
			t.next, t.prev, t.stopped = now.Add(iv), now, false
		}
		t.due = !now.Before(t.next)
	}
}

// flushing is a Shared limiter in a hub's flush.
type flushing struct {
	s     *Shared
	start time.Time
	now   int64 // s's clock at start, Unix nanoseconds
	sent  bool  // items collected
}

// flushShared flushes every limiter of due: it collects each one's
// pending keys, sends the items of those of equal FlushTimeout together,
// then settles them and schedules each one's next flush. A limiter with
// nothing pending, no key near its limit and no failure (an idle one)
// only has its next flush scheduled, without a lock.
func (h *hub) flushShared(ctx context.Context, due []*Shared) {
	start := time.Now()
	fl := h.flushing[:0]
	for _, s := range due {
		if s.quiet() {
			s.schedule(start, false, h.ticks[s.interval].prev)
			continue
		}
		s.flushMu.Lock()
		f := flushing{s: s, start: time.Now(), now: s.clock.Now().UnixNano()}
		f.sent = s.collect(f.now)
		fl = append(fl, f)
	}
	h.sendShared(ctx, fl)
	var probed bool
	var probeErr error
	anyOK := false
	for _, f := range fl {
		s := f.s
		var err error
		if f.sent {
			err = s.settleAll(f.start, f.now, false)
			anyOK = anyOK || err == nil
		} else if s.failures > 0 {
			// Idle while degraded, or after a failed flush whose items
			// are all gone: probe the store's clock instead (once for
			// all), so that the state follows the store without traffic.
			if !probed {
				probed = true
				probeErr = h.probeTime(ctx, s)
			}
			err = probeErr
			if err != nil {
				s.lastErr.set(err)
			}
			s.record(err)
		}
		s.schedule(f.start, s.failures >= s.failMax, h.ticks[s.interval].prev)
		s.flushMu.Unlock()
	}
	if anyOK && time.Since(h.offsetAt) > offsetEvery {
		h.offsetAt = time.Now()
		_ = h.probeTime(ctx, fl[0].s)
	}
	clear(fl)
	h.flushing = fl[:0]
}

// probeTime reads the store's clock through s's Backend within s's
// FlushTimeout and records the offset (one store, one clock).
func (h *hub) probeTime(ctx context.Context, s *Shared) error {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	off, err := storeOffset(cctx, s.backend)
	if err != nil {
		return storeError(err)
	}
	h.offset.Store(off)
	return nil
}

// sendShared sends the collected items of fl in groups of equal
// FlushTimeout, each group under one deadline: the items of RedisBackends
// on the hub's client together, in pipelines of at most the group's
// smallest MaxBatch; the others through their own Backend.
func (h *hub) sendShared(ctx context.Context, fl []flushing) {
	group := h.group[:0]
	for _, f := range fl {
		if f.sent {
			group = append(group, f.s)
		}
	}
	slices.SortStableFunc(group, func(a, b *Shared) int { return int(a.timeout - b.timeout) })
	for lo := 0; lo < len(group); {
		timeout := group[lo].timeout
		hi := lo
		for hi < len(group) && group[hi].timeout == timeout {
			hi++
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		together := group[lo:lo]
		for _, s := range group[lo:hi] {
			if rb, ok := s.backend.(*RedisBackend); ok && h.client != nil && rb.client == h.client {
				together = append(together, s) // in place: never ahead of s
			} else {
				s.sendOwn(cctx)
			}
		}
		h.sendTogether(cctx, together)
		cancel()
		lo = hi
	}
	clear(group)
	h.group = group[:0]
}

// sendTogether sends the items of group, Shared limiters whose Backend is
// a RedisBackend on the hub's client, in pipelines that mix them, each of
// at most the smallest MaxBatch of the group.
func (h *hub) sendTogether(ctx context.Context, group []*Shared) {
	if len(group) == 0 {
		return
	}
	limit := group[0].maxBatch
	for _, s := range group {
		limit = min(limit, s.maxBatch)
	}
	parts, count := h.parts[:0], 0
	for _, s := range group {
		rb := s.backend.(*RedisBackend)
		for lo := 0; lo < len(s.items); {
			hi := min(len(s.items), lo+limit-count)
			parts = append(parts, addPart{b: rb, items: s.items[lo:hi], out: s.results[lo:hi]})
			count += hi - lo
			lo = hi
			if count == limit {
				addParts(ctx, h.client, parts)
				parts, count = parts[:0], 0
			}
		}
	}
	if len(parts) > 0 {
		addParts(ctx, h.client, parts)
	}
	clear(parts)
	h.parts = parts[:0]
}
