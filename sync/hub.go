package sync

import (
	"context"
	"errors"
	"reflect"
	stdsync "sync"
	"sync/atomic"
	"time"
)

// A hub is the one background goroutine of every limiter (Shared or Exact)
// on one store: the go-redis client they share (or, for a Shared limiter
// with a Backend of its own, that Backend value). It flushes the Shared
// limiters, each on its own FlushInterval, the flushes due together in
// shared pipelines; probes the store for the Exact limiters whose calls
// stopped reaching it; reads the store's eviction state (one INFO per
// check for all of them); measures each limiter's failure share; and calls their OnStateChange, in order. The first
// limiter on a store starts its hub, the last Close stops it.
type hub struct {
	key    any         // in hubs.m; nil: not registered (an incomparable key)
	refs   int         // limiters using it; under hubs.mu
	client RedisClient // the store's client, nil for a Backend's hub
	read   func(context.Context) (evictionInfo, error)
	watch  *evictionWatch
	offset atomic.Int64 // the store's clock minus ours, last measured

	mu        stdsync.Mutex
	shared    []*Shared
	exact     []*Exact
	intervals map[time.Duration]int // FlushIntervals of shared, counted
	checks    map[time.Duration]int // positive EvictionChecks, counted
	cur       *round                // the round in progress, nil between rounds
	stop      chan struct{}
	done      chan struct{}
	wake      chan struct{} // capacity 1

	// limiters with work for the hub since its last round (see activate)
	actMu stdsync.Mutex
	actS  []*Shared
	actE  []*Exact
	// FlushIntervals whose tick is stopped: no Shared limiter of them has
	// work, so the hub does not wake for them; the first that activates
	// wakes it (see activateShared and idleTicks). Under actMu.
	idleIv map[time.Duration]bool

	// visits, if set, counts the hub's rounds and visits (tests)
	visits atomic.Pointer[visitLog]

	// used by the hub's goroutine only
	log       *visitLog            // visits, as of the round's start
	hotS      map[*Shared]struct{} // the Shared limiters it visits
	hotE      map[*Exact]struct{}  // the Exact limiters it visits
	ticks     map[time.Duration]*tick
	ivs       []time.Duration
	evictNext time.Time
	lastEvict error // of the last eviction check
	offsetAt  time.Time
	spareS    []*Shared
	spareE    []*Exact
	replays   []*Exact
	tmp       []*Shared
	group     []*Shared
	flushing  []flushing
	parts     []addPart
}

// visitLog counts a hub's rounds and how often each limiter was visited
// in them: what an idle limiter costs per round is what tests count.
type visitLog struct {
	mu     stdsync.Mutex
	rounds uint64
	n      map[any]uint64 // by *Shared or *Exact
}

// visit counts a visit of l; a nil log counts nothing.
func (v *visitLog) visit(l any) {
	if v == nil {
		return
	}
	v.mu.Lock()
	v.n[l]++
	v.mu.Unlock()
}

// tick is the schedule of the Shared limiters of one FlushInterval. It
// runs while some of them have work (the hub visits them), and stops when
// none has: idle limiters cost the hub no wake-up per FlushInterval.
type tick struct {
	next, prev time.Time // the next tick; the start of the last one
	due        bool      // in this round
	used       bool      // a limiter of its interval has work after this round
	stopped    bool      // since the end of the last round: restarted when next used
}

// round is one pass of a hub over its limiters; cancel ends its store
// calls early (a Close whose deadline passed).
type round struct {
	cancel    context.CancelFunc
	done      chan struct{}
	exactDone chan struct{} // closed once the round is done with Exact limiters
}

// hubs holds the hub of every store in use, by client (or Backend).
var hubs = struct {
	mu stdsync.Mutex
	m  map[any]*hub
}{m: make(map[any]*hub)}

// hubEvictionTimeout bounds a hub's INFO call.
const hubEvictionTimeout = time.Second

// minEvictionCheck is the shortest time between two INFO calls of one hub,
// whatever the limiters' EvictionCheck.
const minEvictionCheck = time.Second

// joinHub returns the hub of key, started if it is the first user; mk
// builds a new one. Each joinHub needs one leave.
func joinHub(key any, mk func() *hub) *hub {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	comparable := key != nil && reflect.TypeOf(key).Comparable()
	if comparable {
		if h := hubs.m[key]; h != nil {
			h.refs++
			return h
		}
	}
	h := mk()
	h.refs = 1
	h.stop = make(chan struct{})
	h.done = make(chan struct{})
	h.wake = make(chan struct{}, 1)
	h.ticks = make(map[time.Duration]*tick)
	h.idleIv = make(map[time.Duration]bool)
	h.intervals = make(map[time.Duration]int)
	h.checks = make(map[time.Duration]int)
	h.hotS = make(map[*Shared]struct{})
	h.hotE = make(map[*Exact]struct{})
	if comparable {
		h.key = key
		hubs.m[key] = h
	}
	go h.run()
	return h
}

// clientHub returns the hub of client, started if needed.
func clientHub(client RedisClient) *hub {
	return joinHub(client, func() *hub {
		h := &hub{client: client}
		var why error
		if !canReadEviction(client) {
			why = errNoInfo
		}
		rb := &RedisBackend{client: client}
		h.read = rb.evictionInfo
		h.watch = newEvictionWatch(minEvictionCheck, why)
		return h
	})
}

// backendHub returns the hub of a Backend that is not a RedisBackend.
func backendHub(b Backend) *hub {
	return joinHub(b, func() *hub {
		h := &hub{}
		var why error
		if er, ok := b.(evictionReader); ok {
			h.read = er.evictionInfo
		} else {
			why = errors.New("the Backend cannot read the store's INFO")
		}
		h.watch = newEvictionWatch(minEvictionCheck, why)
		return h
	})
}

// poke makes the hub run a round now.
func (h *hub) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// leave removes a limiter (remove, run under h.mu, takes it out of the
// hub's lists), waits until no round uses it (if ctx ends first, the round
// in progress is cancelled: its store calls end at once), and stops the
// hub if it was the last user. An Exact limiter (exact) waits only for the
// part of the round that can use it, not for the flushes of the Shared
// ones.
func (h *hub) leave(ctx context.Context, exact bool, remove func()) {
	h.mu.Lock()
	remove()
	r := h.cur
	h.mu.Unlock()
	if r != nil {
		wait := r.done
		if exact {
			wait = r.exactDone
		}
		select {
		case <-wait:
		case <-ctx.Done():
			r.cancel()
			<-wait
		}
	}
	hubs.mu.Lock()
	h.refs--
	last := h.refs == 0
	if last {
		if h.key != nil {
			delete(hubs.m, h.key)
		}
		close(h.stop)
	}
	hubs.mu.Unlock()
	if last {
		<-h.done
	}
}

// removeItem removes x from *list, order not kept.
func removeItem[T comparable](list *[]T, x T) {
	l := *list
	for i := range l {
		if l[i] == x {
			l[i] = l[len(l)-1]
			var zero T
			l[len(l)-1] = zero
			*list = l[:len(l)-1]
			return
		}
	}
}

// run is the hub's goroutine: a round whenever something is due or a
// limiter asks (poke), until the last limiter leaves.
func (h *hub) run() {
	defer close(h.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-h.wake:
		case <-t.C:
		}
		next := h.round()
		t.Reset(max(0, time.Until(next)))
	}
}

// round does what is due at once for the limiters with work (see
// activate) and returns when the next thing is due.
func (h *hub) round() time.Time {
	r := &round{done: make(chan struct{}), exactDone: make(chan struct{})}
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	h.mu.Lock()
	h.cur = r
	h.ivs = h.ivs[:0]
	for iv := range h.intervals {
		h.ivs = append(h.ivs, iv)
	}
	every := time.Duration(0)
	for c := range h.checks {
		if every == 0 || c < every {
			every = c
		}
	}
	h.mu.Unlock()
	exactDone := false
	h.log = h.visits.Load()
	defer func() {
		if h.log != nil {
			h.log.mu.Lock()
			h.log.rounds++
			h.log.mu.Unlock()
		}
		r.cancel()
		h.mu.Lock()
		h.cur = nil
		h.mu.Unlock()
		if !exactDone {
			close(r.exactDone)
		}
		close(r.done)
	}()
	h.takeActive()
	now := time.Now()
	next := now.Add(time.Hour)
	if every > 0 {
		h.evict(ctx, now, max(every, minEvictionCheck), &next)
	}
	h.runExact(ctx, now, &next)
	exactDone = true
	close(r.exactDone)
	h.runShared(ctx, now, &next)
	return next
}

// takeActive adds the limiters activated since the last round to those
// the hub visits.
func (h *hub) takeActive() {
	h.actMu.Lock()
	as, ae := h.actS, h.actE
	h.actS, h.actE = h.spareS[:0], h.spareE[:0]
	h.actMu.Unlock()
	for _, s := range as {
		if !s.left.Load() {
			h.hotS[s] = struct{}{}
		}
	}
	for _, e := range ae {
		if !e.left.Load() {
			h.hotE[e] = struct{}{}
		}
	}
	clear(as)
	clear(ae)
	h.spareS, h.spareE = as[:0], ae[:0]
}

// activateShared makes the hub visit s from its next round on: s has
// something to flush. Safe for concurrent use; it never blocks for long
// (it is called under a shard lock of s). It wakes the hub only if the
// tick of s's FlushInterval is stopped (no limiter of that interval had
// work): the hub then starts it, and s flushes a FlushInterval from now;
// otherwise s flushes at the tick's next beat, which is scheduled anyway.
func (h *hub) activateShared(s *Shared) {
	if s.active.Load() || !s.active.CompareAndSwap(false, true) {
		return
	}
	h.actMu.Lock()
	h.actS = append(h.actS, s)
	wake := h.idleIv[s.interval]
	if wake {
		delete(h.idleIv, s.interval)
	}
	h.actMu.Unlock()
	if wake {
		h.poke()
	}
}

// activateExact makes the hub visit e from its next round on: e has
// decided, or has a change to report. Safe for concurrent use.
func (h *hub) activateExact(e *Exact) {
	if e.hot.Load() || !e.hot.CompareAndSwap(false, true) {
		return
	}
	h.actMu.Lock()
	h.actE = append(h.actE, e)
	h.actMu.Unlock()
	h.poke()
}

// add counts d (a FlushInterval or an EvictionCheck) in counts, or
// uncounts it if n is -1; d <= 0 is not counted. Requires h.mu held.
func add(counts map[time.Duration]int, d time.Duration, n int) {
	if d <= 0 {
		return
	}
	counts[d] += n
	if counts[d] <= 0 {
		delete(counts, d)
	}
}

// evict reads the store's eviction state if a check is due and passes the
// outcome to every limiter that watches it (only a change: a store that
// evicts nothing, as before, changes no limiter).
func (h *hub) evict(ctx context.Context, now time.Time, every time.Duration, next *time.Time) {
	if !h.watch.on() {
		return
	}
	if now.Before(h.evictNext) {
		*next = minTime(*next, h.evictNext)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, hubEvictionTimeout)
	err := h.watch.check(cctx, h.read)
	cancel()
	h.evictNext = time.Now().Add(every)
	*next = minTime(*next, h.evictNext)
	if h.watch.takeRestart() {
		h.storeLost()
	}
	if err == nil && h.lastEvict == nil {
		return
	}
	h.lastEvict = err
	h.mu.Lock()
	sh := append(h.tmp[:0], h.shared...)
	ex := append(h.spareE[:0], h.exact...)
	h.mu.Unlock()
	for _, s := range sh {
		if s.evictEvery > 0 {
			s.flushMu.Lock()
			s.setEvicting(err)
			s.flushMu.Unlock()
		}
	}
	for _, e := range ex {
		if e.evictEvery > 0 {
			e.setEvicting(err)
			h.hotE[e] = struct{}{} // to report the change
			e.hot.Store(true)
		}
	}
	clear(sh)
	clear(ex)
	h.tmp, h.spareE = sh[:0], ex[:0]
}

// eviction returns what a limiter that watches eviction every (negative:
// never) knows of it.
func (h *hub) eviction(every time.Duration) Eviction {
	if every <= 0 {
		return Eviction{}
	}
	return h.watch.stats()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
